"""A run's local_text folder moved (dataset.path 'data' -> 'data2', the same files, the same bytes) and resumed was
refused as 'dataset.path: 'data' -> 'data2'' with 'Resume with the saved values', which a user whose data moved
cannot give. The resume now goes on where the new folder holds the files the run read (dataset.path logged as
applied), and the refusal of a folder holding other files names the digest check and says to put the data back. The
references: a byte-for-byte copy of the folder (shutil.copytree) and one with a file edited."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def _run_reading(tiny_finished_run: Path, run: Path, data: Path) -> dict:
    """``tiny_finished_run`` copied to ``run`` as if it had read the local_text folder ``data`` (its recipe state's
    config and data state say so); its saved config."""
    import torch

    from torchtune_longshort.data.file_paths import file_digests
    from torchtune_longshort.training.checkpointing import recipe_state_path

    shutil.copytree(tiny_finished_run, run, symlinks=True)
    state_file = recipe_state_path(run / "step_1")
    state = torch.load(state_file, weights_only=False)
    state["config"]["dataset"] = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(data)}
    state["data"]["stream"]["digests"] = file_digests(sorted(data.glob("*.txt")))
    torch.save(state, state_file)
    return state["config"]


def test_a_data_folder_moved_as_it_was_resumes_and_another_is_refused_naming_the_check(tiny_finished_run, tmp_path):
    from torchtune_longshort.training.resume import resume_changes

    data, moved, other = tmp_path / "data", tmp_path / "data2", tmp_path / "data3"
    data.mkdir()
    for i in range(3):
        (data / f"doc{i}.txt").write_text(f"document {i} " * 50)
    saved = _run_reading(tiny_finished_run, tmp_path / "run", data)
    shutil.copytree(data, moved)
    shutil.copytree(data, other)
    (other / "doc1.txt").write_text("another text " * 50)
    shutil.rmtree(data)  # moved away

    config = {**saved, "dataset": {**saved["dataset"], "path": str(moved)}}
    assert ("dataset.path", str(data), str(moved)) in resume_changes(tmp_path / "run", config)

    config = {**saved, "dataset": {**saved["dataset"], "path": str(other)}}
    with pytest.raises(ValueError, match=(
            rf"dataset\.path: '{data}' -> '{other}' \(its files are not those the run read: their sizes and first MiB "
            rf"differ from the digests its data state saved; to resume, put the run's data back at '{data}'\)")):
        resume_changes(tmp_path / "run", config)
