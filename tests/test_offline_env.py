"""The task pack's word for hub data it could not load says "offline mode is on" exactly when ``datasets`` is
offline, whichever of its variables made it so (TRANSFORMERS_OFFLINE=1 alone read as "the hub could not be reached",
beside datasets' own "OfflineModeIsEnabled")."""

import json
import subprocess
import sys

from torchtune_longshort.eval.tasks.common.unavailable import hub_failure_reason, offline_mode

VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
CASES = [{}, {"TRANSFORMERS_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "1"}, {"HF_DATASETS_OFFLINE": "yes"},
         {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "TRUE"}, {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"},
         {"HF_DATASETS_OFFLINE": "0", "HF_HUB_OFFLINE": "1"}, {"HF_DATASETS_OFFLINE": "", "TRANSFORMERS_OFFLINE": "1"},
         {"HF_DATASETS_OFFLINE": "on"}, {"TRANSFORMERS_OFFLINE": "no"}]

# In one child process, for each case: datasets' own verdict (huggingface_hub's constants and datasets' config read
# again under the case's environment).
CHILD = """
import importlib, json, os, sys
import huggingface_hub.constants, datasets.config
out = []
for case in json.loads(sys.argv[1]):
    for k in %r:
        os.environ.pop(k, None)
    os.environ.update(case)
    importlib.reload(huggingface_hub.constants)
    importlib.reload(datasets.config)
    out.append(bool(datasets.config.HF_HUB_OFFLINE))
print(json.dumps(out))
""" % (VARS,)


def test_offline_mode_is_datasets_own_verdict(monkeypatch):
    theirs = json.loads(subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True,
                                       text=True, check=True).stdout)
    ours = []
    for case in CASES:
        for k in VARS:
            monkeypatch.delenv(k, raising=False)
        for k, v in case.items():
            monkeypatch.setenv(k, v)
        ours.append(offline_mode())
    assert ours == theirs, list(zip(CASES, ours, theirs))
    assert any(theirs) and not all(theirs)


def test_the_reason_names_the_variable_that_set_offline_mode(monkeypatch):
    for k in VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    err = ConnectionError("Couldn't reach 'emozilla/pg19-test' on the Hub (OfflineModeIsEnabled)")
    said = hub_failure_reason("'emozilla/pg19-test'", err)
    assert "offline mode is on (TRANSFORMERS_OFFLINE=1) and it is not in the local cache" in said, said
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")  # datasets' own variable keeps it online
    assert "could not be reached" in hub_failure_reason("'emozilla/pg19-test'", err)


def test_a_recipe_source_offline_names_the_variable_as_the_task_pack_does(monkeypatch):
    """hf_text / a torchtune builder under TRANSFORMERS_OFFLINE=1 (huggingface_hub's switch, so datasets' too) was
    told 'offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)', naming two variables that were not set; the data
    side now asks the task pack's reader of offline mode (one reader), and names the variable set."""
    from torchtune_longshort.data.hf_loading import load_failure

    err = ConnectionError("Couldn't reach 'emozilla/pg19' on the Hub (OfflineModeIsEnabled)")
    for case in ({"TRANSFORMERS_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "yes"}, {"HF_DATASETS_OFFLINE": "1"}):
        for k in VARS:
            monkeypatch.delenv(k, raising=False)
        for k, v in case.items():
            monkeypatch.setenv(k, v)
        (named,) = [f"{k}={v}" for k, v in case.items()]
        said = str(load_failure("dataset", "emozilla/pg19", None, "train", err))
        assert f"offline mode is on ({named}) and the Hugging Face cache holds no copy" in said, said
        assert f"offline mode is on ({named})" in hub_failure_reason("'emozilla/pg19'", err)
