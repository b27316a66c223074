"""Edges of :func:`~torchtune_longshort.study.run_configs.check_study_output` no earlier test held: a new folder (not
there yet) is taken and not made; a file, or a missing ``*.json`` name, is refused as no folder; an earlier study's
folder known by its ``study.json`` alone (the summary the runner writes: config and runs) is taken, another tool's
``study.json`` without runs is not; the refusal lists the first three names (``sorted(os.listdir)``) and says
``...`` only when there are more."""

from __future__ import annotations

import json
import os

import pytest

from torchtune_longshort.study.run_configs import check_study_output


def test_a_new_folder_is_taken_and_not_made(tmp_path):
    check_study_output(tmp_path / "new", report_only=False)
    assert not os.path.lexists(tmp_path / "new")


def test_a_file_or_a_json_name_is_refused_as_no_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        check_study_output(tmp_path / "notes.txt", report_only=False)
    with pytest.raises(ValueError, match="names a .json file"):
        check_study_output(tmp_path / "study_out.json", report_only=False)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def _summary(folder, keys):
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    full = {"name": "s", "quick": True, "config": {"name": "s"}, "wall_s_this_invocation": 1.0, "provenance": {},
            "runs": {"base": {"status": "done", "wall_s": 1.0, "error": None}}}
    (folder / "study.json").write_text(json.dumps({k: full[k] for k in keys}))


def test_an_earlier_studys_folder_is_known_by_its_study_json(tmp_path):
    _summary(tmp_path / "old", ["name", "quick", "config", "runs"])
    (tmp_path / "old" / "runs").mkdir()
    check_study_output(tmp_path / "old", report_only=False)
    _summary(tmp_path / "exact", ["config", "runs"])
    check_study_output(tmp_path / "exact", report_only=False)
    _summary(tmp_path / "other", ["name", "quick", "config"])  # another tool's study.json: no runs
    with pytest.raises(FileExistsError, match="holds 'study.json'"):
        check_study_output(tmp_path / "other", report_only=False)


@pytest.mark.parametrize("n", [3, 4])
def test_the_refusal_names_three_entries_and_says_more_only_when_there_are(tmp_path, n):
    folder = tmp_path / "mine"
    folder.mkdir()
    for k in range(n):
        (folder / f"f{n - k}.txt").write_text("x")
    with pytest.raises(FileExistsError) as e:
        check_study_output(folder, report_only=False)
    first = sorted(os.listdir(folder))[:3]
    assert f"holds {', '.join(map(repr, first))}{' ...' if n > 3 else ''} and is not" in str(e.value)
