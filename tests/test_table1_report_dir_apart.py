"""Table 1's ``--report-dir`` that is its ``--out`` or lies in ``--out``'s ``cells/``: ``--out X --report-dir X``
rewrote the study's own ``cells/<cell>/result.json`` with the report's copies, and ``--report-dir X/cells`` nested a
report and a ``cells/cells/`` tree among the cells. Refused now in one line before any cell runs (paths compared
resolved: a link to ``X`` is ``X``), nothing written."""

from __future__ import annotations

import os

import pytest

import torchtune_longshort.study.base_config as base_config
import torchtune_longshort.study.table1.__main__ as table1_main


@pytest.mark.parametrize("report", ["X", "X/cells", "X/cells/sub", "link_to_X"])
def test_a_report_dir_in_the_studys_own_cells_is_refused_before_any_cell(report, tmp_path, monkeypatch, capsys):
    fetched = []
    monkeypatch.setattr(base_config, "pypi_model", lambda name: fetched.append(name) or tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    if report == "link_to_X":
        os.mkdir("X")
        os.symlink("X", "link_to_X")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(SystemExit) as stop:
        table1_main.main(["--config", "study/table1_smollm2.yaml", "--quick", "--out", "X", "--report-dir", report])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"python -m torchtune_longshort.study.table1: error: --report-dir={report!r} "), err
    assert err[0].endswith("name another folder (default: <out>/report)"), err
    assert fetched == [] and sorted(os.listdir(tmp_path)) == before and not os.path.exists(tmp_path / "X" / "cells")


def test_a_report_dir_beside_the_cells_is_taken(tmp_path):
    """``X/report`` (the default) and ``X/rep`` pass the check: only ``X`` and its ``cells/`` are the study's."""
    from torchtune_longshort.study.table1.runner import Table1

    t1 = Table1.__new__(Table1)
    t1.out = tmp_path / "X"
    for ok in ("report", "rep", "cells_report"):
        t1.check_report_apart(tmp_path / "X" / ok)


@pytest.mark.parametrize("out, report", [("P/cells", "P"), ("P/X", "P"), ("P/Q/X", "P")])
def test_a_report_dir_that_holds_the_out_is_refused_as_the_studys_is(out, report, tmp_path):
    """``--out P/cells --report-dir P`` was taken: after every cell the report wrote its copies ``cells/<cell>/
    result.json`` into the output folder, beside its own ``cells/``. A report folder that holds ``--out`` is refused,
    by the study's rule (its check refuses the same pair); the reference: pathlib's ``is_relative_to``."""
    from torchtune_longshort.study.run_configs import check_report_apart
    from torchtune_longshort.study.table1.runner import Table1

    t1 = Table1.__new__(Table1)
    t1.out = tmp_path / out
    assert t1.out.is_relative_to(tmp_path / report) and t1.out != tmp_path / report
    with pytest.raises(ValueError, match=r"output folder .*, holds it, or lies in its cells/") as err:
        t1.check_report_apart(tmp_path / report)
    assert str(err.value).endswith("name another folder (default: <out>/report)")
    with pytest.raises(ValueError, match="is the study's output folder"):
        check_report_apart(tmp_path / report, t1.out)
