"""One device rule for every entry point (``torchtune_longshort.devices``): a device this machine does not have is
refused before any work, in one line naming the field and the fix; nothing falls back to another device (the eval
model used to run on the CPU and record ``device: cuda`` in its results beside ``cpu`` in its provenance).

Each case gives a device that is absent here (``cuda`` without CUDA; ``cuda:99`` on a machine with CUDA) and
inputs that would fail *later* (a checkpoint folder that does not exist): the device must be what is refused."""

from __future__ import annotations

import sys

import pytest
import torch

from torchtune_longshort.devices import require_device

ABSENT = "cuda:99" if torch.cuda.is_available() else "cuda"
WHY = "this machine has" if torch.cuda.is_available() else "CUDA is not available on this machine"


def _one_line(capsys, prog: str) -> str:
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith(f"{prog}: error: "), err
    return err[0]


def test_the_rule():
    assert require_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=rf"device='{ABSENT}': {WHY}.*; pass device=cpu, or run where that device"):
        require_device(ABSENT)
    with pytest.raises(ValueError, match=r"--device='gpu': not a device name \(accepted: cpu, cuda, cuda:N or mps\); "
                                         r"pass --device cpu"):
        require_device("gpu", "--device")


def test_recipe_refuses_before_anything(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    from recipe_config import make_cfg

    from torchtune_longshort.training.recipe_config import load_recipe_config

    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", device=ABSENT)
    with pytest.raises(ValueError, match=rf"device='{ABSENT}': {WHY}"):
        load_recipe_config(cfg)
    assert not (tmp_path / "out").exists()


def test_misalignment_cli_refuses_before_reading_the_checkpoint(tmp_path, capsys):
    from torchtune_longshort.metrics.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--checkpoint-dir", str(tmp_path / "missing"), "--length", "1k", "--device", ABSENT])
    assert e.value.code == 2
    line = _one_line(capsys, "longshort-misalignment")
    assert f"--device='{ABSENT}': {WHY}" in line and "missing" not in line


@pytest.mark.parametrize("model", ["longshort", "hf"])
def test_longshort_eval_refuses_for_any_model_before_lm_eval_runs(tmp_path, capsys, monkeypatch, model):
    from torchtune_longshort.eval.__main__ import main

    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run", "--model", model, "--model_args",
                                      f"pretrained={tmp_path / 'missing'}", "--device", ABSENT,
                                      "--tasks", "longshort_ppl"])
    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == 2
    assert f"longshort-eval: error: --device='{ABSENT}': {WHY}" in _one_line(capsys, "longshort-eval")


def test_the_eval_model_refuses_instead_of_falling_back(tmp_path):
    from torchtune_longshort.eval.model.args import parse_model_args

    with pytest.raises(ValueError, match=rf"device='{ABSENT}': {WHY}"):
        parse_model_args(pretrained=str(tmp_path / "missing"), device=ABSENT)
