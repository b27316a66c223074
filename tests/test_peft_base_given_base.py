"""``longshort-eval peft-base STEP --out DIR --base B`` where the adapters' recorded base is a folder here: ``B`` must
be that checkpoint. A copy of it (the same bytes, ``filecmp``) is taken; another checkpoint (other weights, its
``model.safetensors`` of another sha256) is refused in one line naming ``--base``, exit 2, nothing written: PEFT on
another model's weights gives another model than the run's."""

from __future__ import annotations

import filecmp
import hashlib
import os
import shutil

import pytest

pytest.importorskip("peft")

from test_peft_adapter_other_step import yarn_run  # noqa: E402
from test_peft_base_folder import PROG, _refused  # noqa: E402

from torchtune_longshort.eval.peft_base import main  # noqa: E402


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_given_base_must_be_the_recorded_checkpoint(tmp_path, capsys):
    base, step2, step3 = yarn_run(tmp_path)
    other = tmp_path / "other"
    shutil.copytree(step2, other, ignore=shutil.ignore_patterns("adapter"))
    assert _sha(other / "model.safetensors") != _sha(base / "model.safetensors")
    line = _refused(capsys, tmp_path, step3, "--out", tmp_path / "o", "--base", other)
    assert f"--base {other}: not the checkpoint these adapters were trained on" in line, line

    copy = tmp_path / "copy"
    shutil.copytree(base, copy)
    assert filecmp.cmp(copy / "model.safetensors", base / "model.safetensors", shallow=False)
    assert main([str(step3), "--out", str(tmp_path / "o"), "--base", str(copy)], PROG) == 0
    assert os.path.samefile(tmp_path / "o" / "model.safetensors", copy / "model.safetensors")
