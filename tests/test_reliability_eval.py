"""Evaluation never sinks (issue 13, items 5 and 6, evaluation side): every bad input is a per-task NaN (or no
score) with the reason in the results file while the other tasks' results are still written, or a refusal
before anything runs. One test per case; the end-to-end ones share three lm-eval runs (module fixtures).

Cases:
- hub data offline: ``longshort_ppl`` (default source pg19), ``longshort_babilong``, ``longshort_longbench_e`` ->
  reason;
- ``longbench_e`` with ``max_gen_toks`` >= the model's length -> NaN with the reason for those tasks only;
- a passkey prompt longer than the model -> refused (NaN with the reason), never truncated; a task that
  declares middle truncation (LongBench-E) is cut, as its protocol says;
- ``misalignment_<L>`` under ``--model hf`` -> refused before any request runs, through our wrapper and
  through plain ``lm_eval``; a length ``hf`` would cut -> refused at the task;
- the report refuses to merge results of different checkpoints into one column;
- ``longshort-misalignment --length`` past the model's positions -> refused before loading;
- a corrupted weight file -> the eval model's error names it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from warm_start import with_warm_start  # noqa: E402

from torchtune_longshort.eval.cli_run import run_cli  # noqa: E402
from torchtune_longshort.eval.report.results_io import load_run_info, not_scored_of  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class _Results(dict):
    """A results file's ``results`` block; ``not_scored``: its reasons per task (the ``configs`` entries), never
    in the metrics."""

    not_scored: dict


def _results(data):
    res = _Results(data["results"])
    res.not_scored = not_scored_of(data)
    assert not [t for t, m in res.items() if "error,none" in m], "a reason in lm-eval's metric table"
    return res


def _longshort(ckpt, tok, out, tasks, meta, extra=""):
    return _results(run_cli(["run", "--model", "longshort", "--model_args", f"pretrained={ckpt},tokenizer={tok}{extra}",
                             "--device", "cpu", "--batch_size", "2", "--tasks", tasks,
                             "--metadata", json.dumps(meta), "--output_path", str(out)]))


def _subprocess(argv, tmp_path):
    # conftest's offline HF_* and cache folders, and the warm start: the command is forked from the zygote
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=with_warm_start(str(REPO)))
    out = subprocess.run([sys.executable, "-m", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    files = sorted((tmp_path / "out").rglob("results_*.json"))
    assert len(files) == 1, files
    return _results(json.loads(files[0].read_text())), out.stdout + out.stderr


def _finite(res, task, metric):
    v = res[task][f"{metric},none"]
    return isinstance(v, (int, float)) and math.isfinite(v)


def _nan(res, task, metric):
    return math.isnan(res[task][f"{metric},none"])


def _error(res, task):
    return res.not_scored.get(task, "")


# ------------------------------------------------------------------ shared runs
@pytest.fixture(scope="module")
def offline_run(tiny_llama2_dir, sp_tokenizer_dir, tmp_path_factory):
    """longshort, offline: three hub-data tasks, a passkey length past the model, and a passkey length that fits."""
    out = tmp_path_factory.mktemp("offline_run")
    t0 = time.monotonic()
    res = _longshort(tiny_llama2_dir, sp_tokenizer_dir, out,
                     "longshort_babilong,longshort_longbench_e,longshort_ppl,longshort_passkey",
                     {"passkey_num_samples": 1, "passkey_depths": [50], "ppl_max_seq_lengths": [128],
                      "passkey_max_seq_lengths": [512, 256]})
    return out, res, time.monotonic() - t0


@pytest.fixture(scope="module")
def hf_run(tiny_llama2_dir, sp_tokenizer_dir, tmp_path_factory):
    """lm-eval's hf model through our wrapper: misalignment (needs longshort), a passkey length hf would cut, and
    a longshort_ppl length that fits."""
    tmp = tmp_path_factory.mktemp("hf_run")
    return _subprocess(
        ["torchtune_longshort.eval", "run", "--model", "hf", "--model_args",
         f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},dtype=float32", "--device", "cpu",
         "--tasks", "longshort_misalignment,longshort_passkey,longshort_ppl",
         "--metadata", json.dumps({"ppl_source": "stdlib", "ppl_num_samples": 2, "passkey_num_samples": 1,
                                   "passkey_depths": [50], "max_seq_lengths": [128],
                                   "passkey_max_seq_lengths": [512]}),
         "--output_path", str(tmp / "out")], tmp)


# ------------------------------------------------------------------ hub data offline
def test_hub_loaders_offline_answer_with_a_reason_without_touching_the_network(sp_tokenizer_dir, monkeypatch):
    """No network wait with HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set (conftest): each hub loader gives its
    placeholder with the reason, instead of raising ConnectionError, and opens no connection on the way (a wall-clock
    bound here failed on a loaded machine; a connection attempt is what a wait would come from)."""
    import socket

    attempts = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError(f"test: no network ({address})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    from torchtune_longshort.eval.tasks.babilong import task as bl
    from torchtune_longshort.eval.tasks.longbench_e import task as lb
    from torchtune_longshort.eval.tasks.ppl.task import long_ppl_dataset

    loaders = {
        "emozilla/pg19-test": lambda: long_ppl_dataset(max_seq_lengths=[128], tokenizer=str(sp_tokenizer_dir),
                                                        ppl_source="pg19")["test"],
        "RMT-team/babilong-1k-samples": lambda: bl.load_babilong("qa1", "0k")["qa1"],
        "Xnhyacinth/LongBench": lambda: lb.load_longbench_e("qasper_e")["test"],
    }
    for name, load in loaders.items():
        ds = load()
        assert not attempts, f"{name}: connected to {attempts}"
        assert len(ds) == 1 and name in ds[0]["error"] and "offline" in ds[0]["error"]
    with pytest.raises(ValueError, match="RMT-team/babilong-1k-samples"):  # the opt-out still raises
        bl.load_babilong("qa1", "0k", babilong_missing="error")


@pytest.mark.slow
def test_offline_long_ppl_pg19_is_nan_with_reason_and_other_tasks_written(offline_run):
    _, res, _ = offline_run
    assert _nan(res, "longshort_ppl", "ppl_128") and _nan(res, "longshort_ppl", "token_nll_128")
    assert "emozilla/pg19-test" in _error(res, "longshort_ppl") and "ppl_source=stdlib" in _error(res, "longshort_ppl")
    assert _finite(res, "longshort_passkey", "acc_256") and _finite(res, "longshort_passkey", "acc_256_d50")
    assert "emozilla" not in _error(res, "longshort_passkey")


@pytest.mark.slow
def test_offline_babilong_gives_reason_per_task_and_other_tasks_written(offline_run):
    _, res, _ = offline_run
    for qa in range(1, 6):
        task = f"longshort_babilong_qa{qa}"
        # a group member without data: no score (the group mean covers the tasks that have data), the reason
        assert res[task]["missing_data,none"] == 1.0 and "acc,none" not in res[task]
        assert "RMT-team/babilong-1k-samples" in _error(res, task) and "babilong_data_dir" in _error(res, task)
    assert _finite(res, "longshort_passkey", "acc_256")


@pytest.mark.slow
def test_offline_longbench_e_full_gives_reason_per_task_and_other_tasks_written(offline_run):
    from torchtune_longshort.eval.tasks.longbench_e.official_config import LONGBENCH_E_DATASETS

    _, res, wall = offline_run
    for name in LONGBENCH_E_DATASETS:
        task = f"longshort_longbench_{name}_e"
        assert res[task]["missing_data,none"] == 1.0 and "score,none" not in res[task]
        assert "Xnhyacinth/LongBench" in _error(res, task) and "longbench_e_data_dir" in _error(res, task)
    assert _finite(res, "longshort_passkey", "acc_256")
    assert wall < 300  # the whole run, 23 tasks, with no network wait


def test_bad_local_records_give_a_reason_naming_file_and_line(sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.tasks.ppl.task import long_ppl_dataset

    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"text": "a b c"}\n{"text": "unterminated\n')
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"text": "ok"}\n{"text": "\xff\xfe"}\n')
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text('{"body": "x"}\n')
    for path, want in ((torn, "torn.jsonl:2: not a JSON line"), (binary, "binary.jsonl:2: bytes that are not utf-8"),
                       (nofield, "nofield.jsonl:1: no text field 'text' in the record; its fields are ['body']")):
        ds = long_ppl_dataset(max_seq_lengths=[64], tokenizer=str(sp_tokenizer_dir), ppl_data_files=str(path))["test"]
        assert len(ds) == 1 and want in ds[0]["error"], ds[0]["error"]


# ------------------------------------------------------------------ prompts longer than the model
@pytest.mark.slow
def test_passkey_longer_than_the_model_is_refused_not_truncated(offline_run):
    out, res, _ = offline_run
    assert _nan(res, "longshort_passkey", "acc_512") and _nan(res, "longshort_passkey", "acc_512_d50")
    reason = _error(res, "longshort_passkey")
    assert "may not be cut" in reason and "declared by the task" in reason and "max_length=256" in reason
    assert _finite(res, "longshort_passkey", "acc_256")


def test_prompt_policy_refuse_unless_the_task_declares_a_cut(tiny_llama2_dir, sp_tokenizer_dir):
    """The model's rule, request by request: a prompt longer than max_length - max_gen_toks is refused (an empty
    result carrying the reason) unless its doc declares a truncation or truncation= is given for undeclared tasks;
    max_gen_toks >= max_length refuses every prompt of that request."""
    from torchtune_longshort.eval.model.adapter import LongShortLM
    from torchtune_longshort.eval.tasks.common.unavailable import refusal_of

    long_prompt = "The grass is green. " * 80  # > 256 tokens
    gen = {"max_gen_toks": 4, "until": ["\n"]}

    def ask(lm, doc, kwargs=gen, prompt=long_prompt):
        return lm.generate_until([Instance("generate_until", doc, (prompt, kwargs), 0, metadata=("t", 0, 1))], True)[0]

    lm = LongShortLM(pretrained=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu")
    assert "may not be cut" in refusal_of(ask(lm, {}))  # default: nothing is cut
    assert "may not be cut" in refusal_of(ask(lm, {"prompt_truncation": "none"}))  # passkey's declaration
    assert not refusal_of(ask(lm, {"prompt_truncation": "middle"}))  # LongBench-E's declaration: cut, generated
    assert "leaves no room" in refusal_of(ask(lm, {"prompt_truncation": "middle"}, {"max_gen_toks": 256}, "x = 1"))
    (ll,) = lm.loglikelihood([Instance("loglikelihood", {}, (long_prompt, " green"), 0, metadata=("t", 0, 1))], True)
    assert math.isnan(ll[0]) and "may not be cut" in refusal_of(ll)
    left = LongShortLM(pretrained=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu",
                       truncation="left")
    assert not refusal_of(ask(left, {}))  # an explicit choice for tasks that declare nothing ...
    assert "may not be cut" in refusal_of(ask(left, {"prompt_truncation": "none"}))  # ... never over the task's


@pytest.mark.slow
def test_longbench_e_at_a_short_model_is_nan_for_those_tasks_only(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """gov_report / multi_news ask for max_gen_toks=512 on a 256-position model: those tasks are NaN with the
    reason (it used to abort the whole run); LongBench-E's other tasks are cut in the middle as its protocol
    declares and scored, and the run's other tasks are written."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lb_fixture", REPO / "tests/fixtures/longbench/build_longbench_e_fixture.py")
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    data = fixture.build(tmp_path / "data")
    res = _longshort(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out",
                     "longshort_longbench_e_summarization,longshort_longbench_e_synthetic,longshort_ppl",
                     {"longbench_e_data_dir": str(data), "ppl_source": "stdlib", "ppl_num_samples": 2,
                      "max_seq_lengths": [128]})
    for task in ("longshort_longbench_gov_report_e", "longshort_longbench_multi_news_e"):
        assert _nan(res, task, "score")
        assert "max_gen_toks=512 leaves no room for a prompt in max_length=256" in _error(res, task)
    for task in ("longshort_longbench_passage_count_e", "longshort_longbench_passage_retrieval_en_e"):
        assert _finite(res, task, "score") and not _error(res, task)
    assert _finite(res, "longshort_ppl", "ppl_128")


# ------------------------------------------------------------------ a task that needs the longshort model
@pytest.mark.slow
def test_misalignment_under_hf_refused_before_any_request_and_others_written(hf_run):
    res, log = hf_run
    for d in ("sce", "jeffreys", "js"):
        assert _nan(res, "longshort_misalignment", f"{d}_128")
    assert "needs --model longshort" in _error(res, "longshort_misalignment") and "--model hf" in _error(res, "longshort_misalignment")
    assert _finite(res, "longshort_ppl", "ppl_128")
    # refused while the task was built: before lm-eval ran any request, and no divergence request was sent
    assert log.index("needs --model longshort") < log.index("Running loglikelihood")
    assert "Running next_token_divergence requests" not in log and "AttributeError" not in log


@pytest.mark.slow
def test_length_hf_would_cut_is_refused_at_the_task(hf_run):
    res, _ = hf_run
    assert _nan(res, "longshort_passkey", "acc_512")
    assert "runs at most 256" in _error(res, "longshort_passkey") and "cut them from the left" in _error(
        res, "longshort_passkey")


# ------------------------------------------------------------------ the report: one folder, one run
def _fake_results(path: Path, model="longshort", name="results_2026-01-01T00-00-00.json", recorded=None, **args):
    config = {"model": model, "model_args": {"pretrained": "/ckpt/a", "tokenizer": "/tok", **args}, **(recorded or {})}
    if "fingerprint" in args:
        config["checkpoint_fingerprint"] = config["model_args"].pop("fingerprint")
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(json.dumps({"results": {"longshort_ppl": {"ppl_128,none": 3.0}}, "config": config}))


def test_report_refuses_to_mix_checkpoints_in_one_column(tmp_path):
    from torchtune_longshort.eval.report import build_report
    from torchtune_longshort.eval.report.results_io import load_results

    run = tmp_path / "ours"
    _fake_results(run / "__ckpt__a", batch_size=1)
    _fake_results(run / "__ckpt__a", name="results_2026-01-02T00-00-00.json", batch_size=8)  # same run, resumed
    assert load_results(run)["longshort_ppl"]["ppl_128"] == 3.0
    _fake_results(run / "__ckpt__b", name="results_2026-01-03T00-00-00.json", pretrained="/ckpt/b")
    with pytest.raises(ValueError, match=r"mixes results of different checkpoints.*pretrained: '/ckpt/a' vs '/ckpt/b'"):
        build_report([run], tmp_path / "report")
    assert not (tmp_path / "report").exists()
    load_results(run / "__ckpt__a")  # the subfolder of one run is fine
    same_path = tmp_path / "rewritten"
    _fake_results(same_path, fingerprint="1111")
    _fake_results(same_path, name="results_2026-01-02T00-00-00.json", fingerprint="2222")
    with pytest.raises(ValueError, match="checkpoint folder was rewritten"):
        load_results(same_path)
    mixed_models = tmp_path / "mixed_models"
    _fake_results(mixed_models)
    _fake_results(mixed_models, model="hf", name="results_2026-01-02T00-00-00.json")
    with pytest.raises(ValueError, match="model: 'longshort' vs 'hf'"):
        load_results(mixed_models)
    # dtype / max_length spelled at what the model resolved them to (its results record it: model_dtype,
    # max_length) are the settings left out: one run, not "dtype: None vs 'float32'"
    resolved = {"model_dtype": "torch.float32", "max_length": 1024, "truncation": "none"}
    spelled = tmp_path / "spelled"
    _fake_results(spelled, recorded=resolved)
    _fake_results(spelled, name="results_2026-01-02T00-00-00.json", recorded=resolved, dtype="float32",
                  max_length=1024)
    assert load_results(spelled)["longshort_ppl"]["ppl_128"] == 3.0
    # the report shows the settings --model_args spelled, not every one the model resolved
    assert load_run_info(spelled)["model_settings"] == {"tokenizer": "/tok"}
    _fake_results(tmp_path / "one", recorded=resolved, max_length=1024)
    assert load_run_info(tmp_path / "one")["model_settings"] == {"max_length": "1024", "tokenizer": "/tok"}
    _fake_results(spelled, name="results_2026-01-03T00-00-00.json", recorded={**resolved, "model_dtype":
                                                                              "torch.bfloat16"}, dtype="bfloat16")
    with pytest.raises(ValueError, match="dtype: 'float32' vs 'bfloat16'"):
        load_results(spelled)


@pytest.mark.slow
def test_report_refuses_real_results_of_two_runs_and_lists_reasons(offline_run, tmp_path):
    from torchtune_longshort.eval.report import build_report

    out, _, _ = offline_run
    summary = build_report([out], tmp_path / "report")
    assert "emozilla/pg19-test" in summary["errors"][out.name]["longshort_ppl"]
    assert "Not scored" in (tmp_path / "report" / "report.md").read_text()
    both = tmp_path / "both"
    shutil.copytree(out, both / "a")
    (both / "b").mkdir()  # the same checkpoint path, evaluated again after the folder was rewritten
    src = next(Path(out).rglob("results_*.json"))
    data = json.loads(src.read_text())
    data["config"]["checkpoint_fingerprint"] = "another"
    (both / "b" / "results_2099-01-01T00-00-00.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="checkpoint folder was rewritten"):
        build_report([both], tmp_path / "report2")
