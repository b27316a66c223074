"""One checkpoint folder given to ``longshort-eval run`` under two spellings (``pretrained=out/ck`` and
``pretrained=./out/ck/``, or a link to it) is one checkpoint to ``longshort-eval-report``: longshort-eval records the
folder it resolved (``checkpoint_dir``, absolute, links followed) in every results file.

Before, a run folder holding both was refused ("mixes results of different checkpoints / model settings ...
pretrained: 'out/ck' vs './out/ck'"), and a report made from another working directory showed ``out/ck`` (found
nowhere from there) and split the runs into two checkpoints. The reference: ``os.path.realpath`` of the folder."""

from __future__ import annotations

import json
import os

import pytest

from torchtune_longshort.eval.report.one_run import check_one_run
from torchtune_longshort.eval.report.results_io import load_run_info
from torchtune_longshort.eval.report.runs import same_checkpoint


def _results(folder, name, pretrained, checkpoint_dir):
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model": "longshort", "model_args": f"pretrained={pretrained}", "checkpoint_dir": checkpoint_dir,
              "checkpoint_fingerprint": "f1", "limit": 2}
    (folder / f"results_{name}.json").write_text(json.dumps({"results": {}, "configs": {}, "config": config}))


@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    (tmp_path / "out" / "ck").mkdir(parents=True)
    os.symlink(tmp_path / "out", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    return os.path.realpath("out/ck")


def test_one_folder_under_two_spellings_in_one_run_folder_is_one_run(tmp_path, checkpoint):
    _results(tmp_path / "res" / "out__ck", "2026-01-01T00-00-00", "out/ck", checkpoint)
    _results(tmp_path / "res" / ".__out__ck", "2026-01-02T00-00-00", "./out/ck/", checkpoint)
    _results(tmp_path / "res" / "link__ck", "2026-01-03T00-00-00", "link/ck", os.path.realpath("link/ck"))
    assert check_one_run(tmp_path / "res")["model_args"]["pretrained"] == "out/ck"
    # two folders are still two checkpoints, named by the folders longshort-eval resolved
    other = tmp_path / "out" / "other"
    other.mkdir()
    _results(tmp_path / "res" / "out__other", "2026-01-04T00-00-00", "out/ck", str(other))
    with pytest.raises(ValueError, match=f"pretrained: '{checkpoint}' vs '{other}'"):
        check_one_run(tmp_path / "res")


def test_a_report_on_another_cwd_finds_and_groups_the_folder(tmp_path, checkpoint, monkeypatch):
    _results(tmp_path / "a" / "out__ck", "2026-01-01T00-00-00", "out/ck", checkpoint)
    _results(tmp_path / "b" / "link__ck", "2026-01-01T00-00-00", "link/ck", os.path.realpath("link/ck"))
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    infos = {n: load_run_info(tmp_path / n) for n in ("a", "b")}
    assert infos["a"]["pretrained"] == checkpoint and os.path.isdir(infos["a"]["pretrained"])
    assert same_checkpoint(["a", "b"], infos) == [["a", "b"]]
