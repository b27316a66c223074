"""Table 1 wrote its cells/, report/, table1.json and marker among a user's files: `--out .` in a folder holding
.git/ and notes.txt ran every cell there (exit 0), against the rule the study keeps (study/run_configs.check_only_ours)
that a command writes only into a new or empty folder, or one it made. Table1.check_output (which the command runs
through refusing, before the pre-flight: one line, exit 2) now refuses it with nothing written; an empty folder, or
one holding only a killed run's lock, and a Table 1's own folder are taken. The reference: the folder's listing
(os.listdir) before and after, and the errno of the refusal (EEXIST)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from torchtune_longshort.config.fields import build_section
from torchtune_longshort.study.table1.config import Table1Config
from torchtune_longshort.study.table1.runner import TABLE1_MARKER, Table1


def _table1(tmp_path, out):
    (tmp_path / "ckpt").mkdir(exist_ok=True)  # the config asks only that its config.json is a file
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    cfg = build_section(Table1Config, {
        "name": "mine", "checkpoint_dir": str(tmp_path / "ckpt"), "L0": 256, "lengths": [384], "quick": True,
        "variants": {v: {"method": "linear"} for v in ("a", "b", "c", "d")}, "output_dir": str(tmp_path / "unused")})
    return Table1(cfg, output_dir=out, repo_root=tmp_path, log=lambda m: None)


@pytest.mark.parametrize("where", ["users", "dot"])
def test_an_out_holding_files_no_table1_wrote_is_refused(where, tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    (folder / ".git").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(folder)
    before = sorted(os.listdir(folder))
    with pytest.raises(OSError) as e:
        _table1(tmp_path, (folder if where == "users" else folder / ".").absolute()).check_output()
    assert e.value.errno == errno.EEXIST or isinstance(e.value, FileExistsError), e.value
    assert "is not a Table 1's folder (no .longshort_table1)" in str(e.value), e.value
    assert "'.git', 'notes.txt'" in str(e.value) and "new or empty folder" in str(e.value), e.value
    # "Table 1" is a name, not a noun that takes "the": it read "the Table 1 writes only into ..."
    assert "the Table 1" not in str(e.value) and "this command writes only into" in str(e.value), e.value
    assert sorted(os.listdir(folder)) == before


def test_an_empty_folder_or_a_table1s_own_is_taken(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    _table1(tmp_path, empty).check_output()
    (empty / ".lock").write_text("999999999\n")  # a run killed before it marked the folder left its lock
    _table1(tmp_path, empty).check_output()
    own = tmp_path / "own"
    (own / "cells").mkdir(parents=True)
    (own / "notes.txt").write_text("the user's note in a Table 1's folder\n")
    (own / TABLE1_MARKER).write_text("made by torchtune_longshort's Table 1\n")
    _table1(tmp_path, own).check_output()


def _files(folder):
    """Every file under ``folder`` and its bytes (the reference for "nothing written, nothing replaced")."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("made_by", ["marker", "table1_json"])
def test_a_report_dir_that_is_another_table1s_out_is_refused(made_by, tmp_path):
    """`--report-only --out P --report-dir Y`, Y another Table 1's --out: exit 0, and the report's copies of P's cell
    records replaced Y's own cells/<cell>/result.json. Refused now (its marker, or the table1.json of a Table 1
    before the marker), with nothing under Y changed; a folder holding an earlier report of the study is taken."""
    other = tmp_path / "Y"
    (other / "cells" / "a_384").mkdir(parents=True)
    (other / "cells" / "a_384" / "result.json").write_text(json.dumps(
        {"key": "a_384", "status": "ok", "spec": {"length": 384}, "mine": "Y's own record"}))
    if made_by == "marker":
        (other / TABLE1_MARKER).write_text("made by torchtune_longshort's Table 1\n")
    else:
        (other / "table1.json").write_text(json.dumps({"name": "other", "cells": {"a_384": {"status": "ok"}}}))
    before = _files(other)
    t1 = _table1(tmp_path, tmp_path / "P")
    with pytest.raises(ValueError) as e:
        t1.check_report_apart(other)
    said = str(e.value)
    assert said.startswith(f"--report-dir={str(other)!r} ") and "another Table 1's output folder" in said, said
    assert "name another folder" in said and "\n" not in said, said
    assert _files(other) == before
    report = tmp_path / "P" / "report"  # an earlier report of this study: its copies of the records, its summary
    (report / "cells" / "a_384").mkdir(parents=True)
    (report / "cells" / "a_384" / "result.json").write_text(json.dumps({"key": "a_384", "status": "ok", "spec": {}}))
    (report / "summary.json").write_text(json.dumps({"analysis": {}, "cells": {}}))
    t1.check_report_apart(report)
