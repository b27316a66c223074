"""StepCheckpoints._saved_config (the saved config a lost-tokenizer refusal reads for its fix) took every exception for
"no saved config", so a fault of the code itself vanished into a refusal without its fix. It now returns None only for
what reading a recipe state can meet (no file, an unreadable one, one holding no dict); anything else shows."""

from __future__ import annotations

import errno

import pytest
import torch

from torchtune_longshort.training import checkpointing
from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path


def _state(tmp_path, payload=None, raw: bytes = b""):
    step = tmp_path / "run" / "step_2"
    path = recipe_state_path(step)
    path.parent.mkdir(parents=True)
    if payload is not None:
        torch.save(payload, path)
    else:
        path.write_bytes(raw)
    return step


def test_the_saved_config_is_read(tmp_path):
    assert StepCheckpoints._saved_config(_state(tmp_path, {"config": {"seed": 3}})) == {"seed": 3}


def test_what_reading_a_state_can_meet_gives_none(tmp_path):
    assert StepCheckpoints._saved_config(tmp_path / "run" / "step_2") is None  # no state file
    assert StepCheckpoints._saved_config(_state(tmp_path / "a", raw=b"\0" * 64)) is None  # zeros: a ValueError
    assert StepCheckpoints._saved_config(_state(tmp_path / "b", torch.zeros(2))) is None  # a file holding no dict


def test_a_fault_of_the_code_is_not_taken_for_no_config(tmp_path, monkeypatch):
    def broken(folder, mmap=False):
        raise TypeError("a fault of ours")

    monkeypatch.setattr(checkpointing, "read_recipe_state", broken)
    with pytest.raises(TypeError, match="a fault of ours"):
        StepCheckpoints._saved_config(tmp_path / "run" / "step_2")


def test_a_missing_state_is_the_systems_enoent(tmp_path):
    # what the narrowed except relies on: read_recipe_state lets a missing file's OSError through as the system says it
    with pytest.raises(OSError) as e:
        checkpointing.read_recipe_state(tmp_path / "run" / "step_2")
    assert e.value.errno == errno.ENOENT
