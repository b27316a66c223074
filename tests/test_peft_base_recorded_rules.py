"""Which folder ``longshort-eval peft-base`` takes for a relative recorded base (``base_model_name_or_path``), by the
rules docs/eval.md states: a folder of that name without ``config.json`` is no base (transformers loads no model from
it), the folders above the adapter are searched as given and as links resolve, and a base recorded as ``.`` (the
training ran inside its base) is the folder the command runs in, as PEFT loads ``.``; never the step itself. The
reference: ``os.path.samefile`` of the written weights and the folder's."""

from __future__ import annotations

import json
import os
import shutil

import pytest

pytest.importorskip("peft")

from test_peft_adapter_other_step import yarn_run  # noqa: E402
from test_peft_base_folder import PROG  # noqa: E402

from torchtune_longshort.eval.peft_base import main  # noqa: E402


def _record(step, name):
    config = json.loads((step / "adapter" / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = name
    (step / "adapter" / "adapter_config.json").write_text(json.dumps(config))


def _written_from(step, out, capsys):
    assert main([str(step), "--out", str(out)], PROG) == 0
    capsys.readouterr()
    return out / "model.safetensors"


def test_a_folder_here_of_the_name_without_config_is_not_the_base(tmp_path, capsys, monkeypatch):
    base, _, step3 = yarn_run(tmp_path)
    shutil.copytree(base, tmp_path / "run" / "mybase")  # the checkpoint, beside the run's steps
    (tmp_path / "mybase").mkdir()  # a folder of that name here that no model loads from
    (tmp_path / "mybase" / "notes.txt").write_text("not a model\n")
    _record(step3, "mybase")
    monkeypatch.chdir(tmp_path)  # above the adapter
    written = _written_from(step3, tmp_path / "o", capsys)
    assert os.path.samefile(written, tmp_path / "run" / "mybase" / "model.safetensors")


def test_the_folders_above_a_linked_adapter_are_searched_as_links_resolve(tmp_path, capsys, monkeypatch):
    base, _, step3 = yarn_run(tmp_path)
    shutil.copytree(base, tmp_path / "run" / "mybase")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(step3, tmp_path / "elsewhere" / "l")
    _record(step3, "mybase")
    monkeypatch.chdir(tmp_path / "elsewhere")
    written = _written_from(tmp_path / "elsewhere" / "l", tmp_path / "o", capsys)
    assert os.path.samefile(written, tmp_path / "run" / "mybase" / "model.safetensors")


def test_a_base_recorded_as_dot_is_the_folder_the_command_runs_in(tmp_path, capsys, monkeypatch):
    base, _, step3 = yarn_run(tmp_path)
    _record(step3, ".")
    monkeypatch.chdir(base)
    written = _written_from(step3, tmp_path / "o", capsys)
    assert os.path.samefile(written, base / "model.safetensors")
    assert not os.path.samefile(written, step3 / "model.safetensors")
