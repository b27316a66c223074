"""eval/tasks/common/unavailable.py's edges without a model or the hub: hand mutants that test_hub_unreachable_once,
test_offline_env, test_trust_task_fits, test_datasets_cache_env and test_reliability_eval_checks let through. A
placeholder's reason names its task once, stock lm-eval's --model is read as argparse reads it (--model=NAME, the last
one given), and a hub out of reach by httpx's ConnectError / ConnectTimeout (huggingface_hub's client) is asked once.
References: argparse's own parse of the same command line, the number of times the source was asked."""

from __future__ import annotations

import argparse
import sys

import pytest

from torchtune_longshort.eval.tasks.common import unavailable


@pytest.mark.parametrize("message", ["my_task: its data file is gone", "its data file is gone"])
def test_a_placeholders_reason_names_its_task_once(message):
    pytest.importorskip("datasets")
    row = unavailable.placeholder("my_task", message, {"text": ""})[0]
    assert unavailable.reason_of(row) == "my_task: its data file is gone"


@pytest.mark.parametrize("argv", [["lm_eval", "run", "--model=hf", "--tasks", "x"],
                                  ["lm_eval", "--model", "hf", "--tasks", "x", "--model", "vllm"],
                                  ["lm_eval", "--model", "hf", "--model=vllm"]])
def test_stock_lm_evals_model_is_read_as_argparse_reads_it(monkeypatch, argv):
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delitem(sys.modules, "torchtune_longshort.eval.model.adapter", raising=False)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model")
    reference = parser.parse_known_args(argv[1:])[0].model
    assert unavailable.model_of({}) == reference


@pytest.mark.parametrize("name", ["ConnectError", "ConnectTimeout"])
def test_a_hub_out_of_reach_by_httpx_is_asked_once(monkeypatch, name):
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(unavailable, "_UNREACHABLE", {})
    error = type(name, (Exception,), {"__module__": "httpx"})  # httpx's class, as huggingface_hub raises it
    asks = []

    def documents():
        asks.append(1)
        raise error("[Errno 111] Connection refused")
        yield "never"

    for _ in range(2):
        with pytest.raises(unavailable.TaskDataError, match="could not be reached"):
            list(unavailable.guard_hub_iteration(documents(), "'my/set'"))
    assert len(asks) == 1


def test_a_connection_lost_after_the_first_document_is_asked_again(monkeypatch):
    # only a source out of reach before its first document is remembered: a stream cut later may read next time
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(unavailable, "_UNREACHABLE", {})
    asks = []

    def documents():
        asks.append(1)
        yield "a document"
        raise ConnectionError("Couldn't reach 'my/set' on the Hub (connection reset)")

    for _ in range(2):
        with pytest.raises(unavailable.TaskDataError, match="could not be reached"):
            list(unavailable.guard_hub_iteration(documents(), "'my/set'"))
    assert len(asks) == 2 and unavailable._UNREACHABLE == {}


def test_a_gpt2_style_config_gives_its_positions(tmp_path):
    # GPT-2's config.json names its positions n_positions (and n_ctx), no max_position_embeddings
    transformers = pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "n_positions": 512, "n_ctx": 512}')
    reference = transformers.AutoConfig.from_pretrained(str(tmp_path)).max_position_embeddings
    metadata = {unavailable.MODEL_KEY: "hf", "pretrained": str(tmp_path)}
    assert unavailable.model_positions(metadata) == reference == 512
    unavailable.check_fits_model(reference, metadata)
    with pytest.raises(unavailable.TaskDataError, match=r"runs at most 512 \(its config.json"):
        unavailable.check_fits_model(reference + 1, metadata)


def test_the_model_under_use_cache_is_the_one_it_wraps(tmp_path):
    # --use_cache: lm-eval's evaluate runs a CachingLM around the model; a task asking which model runs got the wrapper
    from lm_eval.api.model import CachingLM
    from lm_eval.models.dummy import DummyLM

    inner = DummyLM()
    scope = {"__name__": "lm_eval.evaluator", "ask": unavailable.evaluated_model}
    exec("def evaluate(lm):\n    return ask()\n", scope)  # a frame of lm-eval's evaluate, its lm a local
    assert scope["evaluate"](inner) is inner  # the reference: the model unwrapped, as evaluate holds it
    assert scope["evaluate"](CachingLM(inner, str(tmp_path / "cache.db"))) is inner
