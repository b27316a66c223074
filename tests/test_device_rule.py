"""One device rule for every entry point (``torchtune_longshort.devices``): a device this machine does not have is
refused before any work, in one line naming the field and the fix; nothing falls back to another device (the eval
model used to run on the CPU and record ``device: cuda`` in its results beside ``cpu`` in its provenance).

Each case gives a device that is absent here (``cuda`` without CUDA; ``cuda:99`` on a machine with CUDA) and
inputs that would fail *later* (a checkpoint folder that does not exist): the device must be what is refused."""

from __future__ import annotations

import os
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
    with pytest.raises(ValueError, match=r"--device='gpu': not a device name "
                                         r"\(accepted: cpu, cuda, cuda:N, mps or mps:N\); pass --device cpu"):
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


def test_more_cpu_processes_than_cores_is_warned_in_one_line_not_refused(tmp_path, monkeypatch, capsys, caplog,
                                                                         sp_tokenizer_dir):
    """``longshort-validate ... --nproc_per_node 1024`` said OK on a 2-core machine, and tune run started 1024
    processes without a word. The reference: the machine's core count, made 2 here."""
    from run_folders import tiny_cfg

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.recipe_config.validate import main

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    warning = ("3 processes on device=cpu, and this machine has 2 CPU cores: each process gets less than one core, "
               "so steps run slower than with fewer processes; use --nproc_per_node 2 or fewer")
    assert main(["tiny/longshort_stdlib.yaml", "batch_size=6", "--nproc_per_node", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"longshort-validate: warning: {warning}" in out and out[-1].startswith("longshort-validate: tiny/")
    assert main(["tiny/longshort_stdlib.yaml", "batch_size=6", "--nproc_per_node", "2"]) == 0
    assert "warning" not in capsys.readouterr().out
    # tune run: rank 0 says it once at the start, before the process group gathers the processes
    monkeypatch.setenv("WORLD_SIZE", "3")

    def stop(*args, **kwargs):
        raise RuntimeError("no process group in this test")

    monkeypatch.setattr(torch.distributed, "init_process_group", stop)
    with pytest.raises(RuntimeError, match="no process group"):
        LongShortFinetuneRecipe(tiny_cfg(tmp_path / "out", sp_tokenizer_dir, batch_size=6))
    assert [r.getMessage() for r in caplog.records if "CPU core" in r.getMessage()] == [warning]
    assert [r.levelname for r in caplog.records if "CPU core" in r.getMessage()] == ["WARNING"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cuda", [False, True])
def test_device_null_is_the_device_torchtune_picks(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, monkeypatch, cuda):
    """`device: null` was this recipe's default, cpu, while torchtune's recipes hand null to get_device, which takes
    CUDA where the machine has it: a torchtune user's config trained on the CPU of a GPU machine without a word. Null
    is now the device torchtune's get_device(None) picks (its _get_device_type_from_env, asked with CUDA faked)."""
    from recipe_config import make_cfg
    from torchtune.utils._device import _get_device_type_from_env

    from torchtune_longshort.training.recipe_config import load_recipe_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1 if cuda else 0)
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", device=None)
    assert cfg.device is None and load_recipe_config(cfg).device == _get_device_type_from_env()
    del cfg.device  # left out: this recipe's default
    assert load_recipe_config(cfg).device == "cpu"
