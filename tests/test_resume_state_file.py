"""A recipe state that does not load (cut short by a copy or a full disk, emptied) is refused in one line that names
it, at both places a resume reads it: the config check's first look (``StepCheckpoints.newest_state``, memory-mapped)
and the resume itself (``read_resume_state``). It ended ``resume=True`` in torch's traceback, exit 1.

Reference: ``torch.load`` itself fails on each file (the file really is unreadable), and reads the whole one back."""

from __future__ import annotations

import os

import pytest
import torch

from run_folders import commit_step
from torchtune_longshort.refusals import fault_line
from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path
from torchtune_longshort.training.resume import read_resume_state


@pytest.mark.parametrize("keep_bytes", [0, 1000])
def test_a_recipe_state_cut_short_is_refused_in_one_line_naming_it(tmp_path, tiny_llama2_dir, keep_bytes):
    run = tmp_path / "run"
    step = commit_step(run, 4, tiny_llama2_dir)
    path = recipe_state_path(step)
    saved = {"step": 4, "optimizer": {"state": {0: {"exp_avg": torch.arange(5000.0)}}, "param_groups": []}}
    torch.save(saved, path)
    assert torch.equal(StepCheckpoints(run).newest_state()["optimizer"]["state"][0]["exp_avg"], torch.arange(5000.0))
    os.truncate(path, keep_bytes)
    with pytest.raises((RuntimeError, EOFError)):  # torch's own reading of the file: it is not a state
        torch.load(path, map_location="cpu", weights_only=False)
    for read in (lambda: StepCheckpoints(run).newest_state(), lambda: read_resume_state(step, {})):
        with pytest.raises(ValueError) as refused:
            read()
        line = fault_line(refused.value)
        assert line is not None and "\n" not in line
        assert f"{path} cannot be read as a recipe state" in line
        assert f"checkpoint_dir={str(step)!r}" in line
    assert path.stat().st_size == keep_bytes and (step / "config.json").is_file()  # nothing removed
