"""Nothing silent (evaluation side), without an lm-eval run: a length past the config's positions names hf's
max_length, the model check reads the wrapper's metadata, the misalignment CLI refuses a length past the positions and
extrapolates only when asked, a corrupted weight file is named by the eval model. Split from
test_reliability_eval.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")


def test_a_length_past_config_positions_names_hfs_max_length(tmp_path):
    """hf's limit from config.json's positions is raised by lm-eval's own max_length= (a dynamic rope_scaling then
    scales as it goes): the refusal named neither the source nor that fix; the fix given, the length runs."""
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError, check_fits_model

    shape = {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 256}
    (tmp_path / "config.json").write_text(json.dumps({**shape,
                                                      "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}))
    meta = {"lm_eval_model": "hf", "pretrained": str(tmp_path)}
    with pytest.raises(TaskDataError, match=r"runs at most 256 \(its config.json's max_position_embeddings\) .* "
                                            r"more positions, max_length=512 in --model_args to run past them, or "
                                            r"longshort-eval --model longshort \(it runs the folder's own dynamic_ntk "
                                            r"scaling\)$"):
        check_fits_model(512, meta)  # a folder already scaled: no rope= override offered (it was)
    # steps written by a run: NTK (only rope_theta and our spec key tell it) and CLEX (a rope_type transformers
    # refuses, spelled with its reason): the longshort model reads both from our spec key
    from torchtune_longshort.models.hf_rope import saved_hf_config

    for method, kw in (("ntk", {"factor": 2.0}), ("clex", {"original_max_seq_len": 128, "t_max": 2})):
        spec = {"method": method, "base": 1e4, "max_seq_len": 256, "head_dim": 16, **kw}
        (tmp_path / "config.json").write_text(json.dumps(saved_hf_config({**shape, "model_type": "llama"}, spec)))
        with pytest.raises(TaskDataError, match=rf"--model longshort \(it runs the folder's own {method} scaling\)$"):
            check_fits_model(512, meta)
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 256}))
    with pytest.raises(TaskDataError, match=r"or longshort-eval --model longshort with rope=<method>,rope_factor=<f>$"):
        check_fits_model(512, meta)
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 256,
                                                      "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}))
    check_fits_model(512, {**meta, "max_length": "512"})
    with pytest.raises(TaskDataError, match=r"runs at most 384 \(its max_length\) and would cut them from the "
                                            r"left: refused. Use a model with more positions, or longshort-eval"):
        check_fits_model(512, {**meta, "max_length": "384"})


def test_model_check_reads_the_wrappers_metadata(monkeypatch):
    from torchtune_longshort.eval.tasks.common.unavailable import needs_longshort

    assert needs_longshort("misalignment_1k", {"lm_eval_model": "longshort"}, "x") is None
    assert "this run uses --model vllm" in needs_longshort("misalignment_1k", {"lm_eval_model": "vllm"}, "x")
    # stock lm-eval (no wrapper metadata, no longshort model loaded): the model's name from its command line
    monkeypatch.delitem(sys.modules, "torchtune_longshort.eval.model.adapter", raising=False)
    monkeypatch.setattr(sys, "argv", ["lm-eval", "run", "--model", "hf", "--tasks", "x"])
    reason = needs_longshort("longshort_misalignment", {}, "x")
    assert "this run uses --model hf" in reason and "longshort-eval run --model longshort" in reason
    monkeypatch.setattr(sys, "argv", ["python"])
    assert "this run uses another model" in needs_longshort("longshort_misalignment", {}, "x")


# ------------------------------------------------------------------ item 6: the misalignment CLI, shards
def _checkpoint_with_tokenizer(ckpt, tok, dest):
    shutil.copytree(ckpt, dest)
    for f in Path(tok).iterdir():
        shutil.copy(f, dest / f.name)
    return dest


def test_misalignment_cli_refuses_length_past_the_positions(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, capsys):
    from torchtune_longshort.metrics.cli import main

    ckpt = _checkpoint_with_tokenizer(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "ckpt")
    with pytest.raises(SystemExit) as e:
        main(["--checkpoint-dir", str(ckpt), "--length", "512", "--num-samples", "2", "--output", str(tmp_path / "m.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--length=512 is past the 256 positions" in err and "--allow-extrapolation" in err
    assert not (tmp_path / "m.json").exists()


def test_misalignment_cli_extrapolates_only_when_asked(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.metrics.cli import main

    ckpt = _checkpoint_with_tokenizer(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "ckpt")
    assert main(["--checkpoint-dir", str(ckpt), "--length", "320", "--num-samples", "2", "--allow-extrapolation",
                 "--output", str(tmp_path / "m.json")]) == 0
    out = json.loads((tmp_path / "m.json").read_text())
    assert out["extrapolated"] is True and out["usable_length"] == 256


def test_corrupted_weight_file_is_named_by_the_eval_model(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.model.adapter import LongShortLM

    ckpt = _checkpoint_with_tokenizer(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "ckpt")
    shard = next(ckpt.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:100])  # torn: a header length with nothing behind it
    with pytest.raises(Exception) as e:
        LongShortLM(pretrained=str(ckpt), device="cpu")
    assert str(shard) in str(e.value)
