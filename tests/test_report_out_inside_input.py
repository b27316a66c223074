"""``longshort-eval-report res_a res_b --out res_a`` (or ``--out res_a/report``) wrote the report into a results
folder it read; refused before anything is written, naming both. The reference: the folders' listing before and
after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _results(folder: Path):
    run = folder / "hf__model"
    run.mkdir(parents=True)
    (run / "results_2026-01-01T00-00-00.json").write_text(json.dumps({
        "results": {"longshort_ppl": {"alias": "longshort_ppl", "ppl_64,none": 10.0}},
        "config": {"model": "hf", "model_args": "pretrained=m"}, "n-samples": {"longshort_ppl": {"effective": 1}},
        "configs": {"longshort_ppl": {"task": "longshort_ppl", "metadata": {}}}, "versions": {"longshort_ppl": 1}}))


@pytest.mark.parametrize("out, where", [("res_a", "is"), ("res_a/report", "lies inside")])
def test_the_report_refuses_an_out_in_a_results_folder_it_reads(tmp_path, monkeypatch, capsys, out, where):
    from torchtune_longshort.eval.report.build import main

    monkeypatch.chdir(tmp_path)
    _results(tmp_path / "res_a")
    _results(tmp_path / "res_b")
    before = _listing(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["res_a", "res_b", "--out", out])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].endswith(f"--out={out!r} {where} the results folder 'res_a', which this report reads: the report "
                           "would be written among its files; name a folder outside it")
    assert _listing(tmp_path) == before


def test_an_out_through_a_loop_of_links_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """``--out loop/rep`` (``ln -s b loop; ln -s loop b``) ended in a traceback, ``RuntimeError: Symlink loop``, out
    of the inside-an-input check's ``Path.resolve``, before the output check that refuses such a path could. The
    reference: ``os.stat`` on that path fails with ELOOP."""
    import errno
    import os

    from torchtune_longshort.eval.report.build import main

    monkeypatch.chdir(tmp_path)
    _results(tmp_path / "res_a")
    (tmp_path / "loop").symlink_to("b")
    (tmp_path / "b").symlink_to("loop")
    with pytest.raises(OSError) as stat:
        os.stat(tmp_path / "loop" / "rep")
    assert stat.value.errno == errno.ELOOP
    before = _listing(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["res_a", "--out", "loop/rep"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert "--out='loop/rep' cannot be created: 'loop' is a symbolic link in a loop" in err[0], err
    assert _listing(tmp_path) == before


def test_the_babilong_generator_refuses_an_out_through_a_loop_of_links_in_one_line(tmp_path, monkeypatch, capsys):
    """The BABILong generator's ``--out loop/bab`` alike (its model-folder check resolved it first)."""
    from torchtune_longshort.eval.tasks.babilong import generator

    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").symlink_to("b")
    (tmp_path / "b").symlink_to("loop")
    with pytest.raises(SystemExit) as e:
        generator.main(["--out", "loop/bab", "--lengths", "0k", "--n", "1", "--qa", "qa1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert "--out='loop/bab' cannot be created: 'loop' is a symbolic link in a loop" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "loop"]
