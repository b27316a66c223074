"""The README's "The study writes only into a new `--out` or one a study made": a user's folder (.git/, notes.txt,
results.json), the working folder (`--out .`) and a BABILong generator's output folder were taken, the study's
base/, runs/, tokenizer/, study.json and report/ written among their files. Each is refused in one line, exit 2,
before the pre-flight and with nothing written; an empty folder is taken, as `tune run` takes an empty output_dir,
and so is a folder a study made. The reference: the folder's listing (os.listdir) before and after."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_SMALL = ROOT / "configs/study/cpu_small.yaml"


def _users(folder: Path) -> None:
    (folder / ".git").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine\n")
    (folder / "results.json").write_text('{"mine": 1}\n')


def _generators(folder: Path) -> None:  # the names the BABILong generator writes
    (folder / "1k").mkdir(parents=True)
    (folder / "1k" / "qa1.jsonl").write_text('{"input": "x"}\n')
    (folder / ".longshort_babilong.json").write_text('["1k/qa1.jsonl"]\n')


def _lock_named(folder: Path) -> None:  # a user's file named as the study's lock: it was deleted as a stale lock
    folder.mkdir(parents=True)
    (folder / ".lock").write_text("my notes\n")


@pytest.mark.parametrize("where", ["users", "dot", "generators", "lock"])
def test_an_out_holding_files_no_study_wrote_is_refused_before_anything_runs(where, tmp_path, monkeypatch, capsys):
    import torchtune_longshort.study.__main__ as study_main

    monkeypatch.setattr(study_main, "preflight", lambda *a, **k: pytest.fail("the pre-flight ran"))
    folder = tmp_path / "mine"
    {"generators": _generators, "lock": _lock_named}.get(where, _users)(folder)
    monkeypatch.chdir(folder)
    before = sorted(os.listdir(folder))
    out = "." if where == "dot" else str(folder)
    rc = study_main.main(["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT), "--out", out])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--out (or the config's output_dir)" in err, err
    if where == "lock":
        assert "holds '.lock', which is not a lock file this project wrote" in err, err
        assert (folder / ".lock").read_text() == "my notes\n"
    else:
        assert "is not a study's folder (no .longshort_study)" in err and "new or empty folder" in err, err
    assert sorted(os.listdir(folder)) == before and sorted(os.listdir(tmp_path)) == ["mine"]


def test_an_empty_folder_or_a_studys_own_is_taken(tmp_path):
    from torchtune_longshort.study.run_configs import STUDY_MARKER, check_study_output

    empty = tmp_path / "empty"
    empty.mkdir()
    check_study_output(empty, report_only=False)
    (empty / ".lock").write_text("999999999\n")  # a study killed before it marked the folder left its lock
    check_study_output(empty, report_only=False)
    own = tmp_path / "own"
    (own / "runs").mkdir(parents=True)
    (own / "notes.txt").write_text("the user's note in a study's folder\n")
    (own / STUDY_MARKER).write_text("made by torchtune_longshort's study\n")
    check_study_output(own, report_only=False)
