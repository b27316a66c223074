"""A study rerun with its ``--out`` spelled another way (``out/../out``, a link to the folder) skips the runs that
finished: their records' specs name the study's folder as ``<study>`` (:mod:`torchtune_longshort.study.portable`).

Before, the new spelling's paths were named ``<study>/../out/...`` (``out/../out`` starts with the folder's text) or by
no place (a link), the specs differed, and the rerun trained every run of the grid again (19 of 19 on the shipped
``cpu_small`` grid). The reference: ``os.path.realpath``, which the places are read by."""

from __future__ import annotations

import os

from torchtune_longshort.study.portable import places, portable, same_spec


def test_the_study_folder_under_another_spelling_is_the_same_place(tmp_path):
    out = tmp_path / "out"
    (out / "runs" / "a").mkdir(parents=True)
    os.symlink(out, tmp_path / "lnk")
    recorded = {"output_dir": str(out / "runs" / "a" / "train"), "tokenizer": {"path": str(out / "tokenizer")}}
    for spelled in (tmp_path / "out/../out", tmp_path / "lnk", str(out) + "/"):
        assert os.path.realpath(spelled) == os.path.realpath(out)
        spec = {"output_dir": f"{spelled}/runs/a/train", "tokenizer": {"path": f"{spelled}/tokenizer"}}
        where = places(spelled, tmp_path)
        named = {"output_dir": "<study>/runs/a/train", "tokenizer": {"path": "<study>/tokenizer"}}
        assert portable(spec, where) == named
        assert same_spec(portable(recorded, places(out, tmp_path)), spec, where)


def test_a_path_outside_every_place_stays_as_given(tmp_path):
    (tmp_path / "out").mkdir()
    os.symlink("/", tmp_path / "root_link")
    where = places(tmp_path / "out", tmp_path / "out")
    given = str(tmp_path / "root_link" / "nowhere")  # resolved it is outside every place: kept as written
    assert portable(given, where) == given and portable("relative/path", where) == "relative/path"


def test_a_relative_string_stays_as_given_when_run_from_inside_a_place(tmp_path, monkeypatch):
    """A study is run from its repository: a spec's relative strings (``L/2`` of an e range, a config's relative
    path) are no absolute folder, though ``os.path.realpath`` would read them in the working directory, a place."""
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    where = places(tmp_path / "out", tmp_path)
    assert os.path.realpath("L/2") == str(tmp_path.resolve() / "L" / "2")  # what reading it as a path would name
    spec = {"e_range": [1, "L/2"], "config": "configs/x.yaml", "device": "cpu"}
    assert portable(spec, where) == spec
