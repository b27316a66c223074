"""``--model_args`` as JSON on the command line (lm-eval 0.4.13 reads ``'{"pretrained": ..., "device": "cpu"}'`` as it
reads ``pretrained=...,device=cpu``): the wrapper reads and rewrites its keys alike in both spellings. Its ``device``
reached lm-eval's hf beside the wrapper's own ``--device`` ("HFLM() got multiple values for keyword argument
'device'"), its ``batch_size`` beside lm-eval's default one. Checked against lm-eval's own parse of the argv."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.eval.cli_run import lm_eval_argv

ARGS = {"pretrained": "no_such_step", "device": "cpu", "batch_size": 2}
SPELLINGS = {"json": json.dumps(ARGS), "k=v": ",".join(f"{k}={v}" for k, v in ARGS.items())}


def _lm_eval_reads(argv):
    from lm_eval._cli.harness import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    return EvaluatorConfig.from_cli(HarnessCLI()._parser.parse_args(argv))


def _argv(model, spelling):
    return ["run", "--model", model, "--tasks", "longshort_ppl", "--model_args", SPELLINGS[spelling]]


@pytest.mark.parametrize("model", ["hf", "longshort"])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_json_model_args_device_and_batch_size_reach_lm_eval_once_as_its_options(model, spelling):
    assert _lm_eval_reads(_argv(model, spelling)).model_args == ARGS  # lm-eval reads both spellings alike
    cfg = _lm_eval_reads(lm_eval_argv(_argv(model, spelling)))
    assert "device" not in cfg.model_args and "batch_size" not in cfg.model_args  # else the model got them twice
    assert (cfg.device, str(cfg.batch_size)) == ("cpu", "2")  # lm-eval keeps its --batch_size a string
    assert cfg.model_args == {"pretrained": "no_such_step"}


@pytest.mark.parametrize("model", ["hf", "longshort"])
def test_json_model_args_device_this_machine_lacks_is_refused_with_the_fix_in_the_spelling_given(model, monkeypatch):
    from lm_eval._cli.utils import key_val_to_dict

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    said = {}
    for spelling, value in (("json", json.dumps({"pretrained": "x", "device": "cuda:3"})),
                            ("k=v", "pretrained=x,device=cuda:3")):
        with pytest.raises(ValueError) as e:
            lm_eval_argv(["run", "--model", model, "--tasks", "longshort_ppl", "--model_args", value])
        said[spelling] = str(e.value).partition("; pass ")
    assert said["json"][0] == said["k=v"][0] and said["json"][0].startswith("--model_args device='cuda:3': CUDA is not")
    # the fix as the user spelled --model_args: a JSON member there ('"device": "cpu"' was '--model_args device=cpu')
    member = said["json"][2].partition(" in --model_args's JSON")[0]
    assert json.loads("{" + member + "}") == {"device": "cpu"}
    assert key_val_to_dict(said["k=v"][2].partition(",")[0].removeprefix("--model_args ")) == {"device": "cpu"}
    lm_eval_argv(["run", "--model", model, "--tasks", "longshort_ppl", "--model_args",
                  json.dumps({"pretrained": "x", **json.loads("{" + member + "}")})])  # the fix, applied, is taken


@pytest.mark.parametrize("key,flag", [("device", "cuda:0"), ("batch_size", "4")])
def test_json_model_args_key_given_as_the_option_too_is_refused_naming_it_as_written(key, flag):
    """``--model_args '{..., "device": "cpu"}' --device cuda:0`` was refused as ``--model_args device=cpu``, a
    spelling the user had not written; each spelling is named as given, read back by lm-eval's own parsers."""
    from lm_eval._cli.utils import key_val_to_dict

    said = {}
    for spelling in SPELLINGS:
        with pytest.raises(ValueError) as e:
            lm_eval_argv(_argv("hf", spelling) + [f"--{key}", flag])
        said[spelling] = str(e.value)
        assert said[spelling].startswith(f"--{key} {flag} and ") and said[spelling].endswith(": give it once "
                                                                                             f"(--{key})")
    member = said["json"].removeprefix(f"--{key} {flag} and ").partition(" in --model_args's JSON")[0]
    assert json.loads("{" + member + "}") == {key: ARGS[key]}  # 2, not "2": the JSON value as written
    item = said["k=v"].removeprefix(f"--{key} {flag} and --model_args ").partition(":")[0]
    assert key_val_to_dict(item) == {key: ARGS[key]}


def test_json_checkpoint_dir_goes_on_as_pretrained_for_the_results_folder():
    argv = ["run", "--model", "longshort", "--tasks", "longshort_ppl", "--model_args",
            json.dumps({"checkpoint_dir": "no_such_step", "dtype": "float32"})]
    assert _lm_eval_reads(lm_eval_argv(argv)).model_args == {"pretrained": "no_such_step", "dtype": "float32"}
