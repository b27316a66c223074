"""The report command (longshort-eval-report) when things go wrong: an --out holding a user's report is refused and an
earlier report replaced; a torn samples line skipped and a broken results file named; cut-off samples said; a report
that fails or is stopped part way leaves nothing it made, and says what its --out holds. Split from
test_eval_report.py."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.eval.report import build_report, main
from torchtune_longshort.eval.report.results_io import load_results
from report_runs import lm_eval_run as _run
from test_eval_report import _write


def test_out_folder_with_a_users_report_is_refused_and_an_earlier_report_is_replaced(tmp_path, capsys):
    # `longshort-eval-report RUN --out myrep` overwrote the user's own myrep/report.md; now refused in one line
    # (exit 2) before anything is written, while a rerun into the folder of an earlier report replaces it.
    _write(tmp_path / "a", {"longshort_ppl": {"ppl_512,none": 9.25}})
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my own notes\n")
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "a"), "--out", str(mine)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "'report.md'" in err and "--out" in err
    assert sorted(p.name for p in mine.iterdir()) == ["report.md"] and (mine / "report.md").read_text() == "my own notes\n"
    # beside another tool's summary.json that lists files: taken for an earlier report's, its files were replaced
    (mine / "summary.json").write_text('{"files": ["report.md", "summary.json", "heatmap_mine.png"]}')
    (mine / "heatmap_mine.png").write_text("mine")
    before = {p.name: p.read_text() for p in mine.iterdir()}
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "a"), "--out", str(mine)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "'report.md', 'summary.json'" in err, err
    assert {p.name: p.read_text() for p in mine.iterdir()} == before
    out = tmp_path / "rep"
    main([str(tmp_path / "a"), "--out", str(out)])
    (out / "notes.txt").write_text("kept")
    main([str(tmp_path / "a"), "--out", str(out)])  # its own earlier files are replaced; other files stay
    assert "| a | 9.25 |" in (out / "report.md").read_text() and (out / "notes.txt").read_text() == "kept"
    with pytest.raises(SystemExit):
        main([str(tmp_path / "a"), "--out", str(out / "notes.txt")])
    assert "is a file, not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a new --out named like a file: a folder of that name was made
        main([str(tmp_path / "a"), "--out", str(tmp_path / "report.JSON")])
    assert "names a .JSON file, where the command wants the folder" in capsys.readouterr().err
    assert not (tmp_path / "report.JSON").exists()
    # an --out that cannot be made said "[Errno 1] Operation not permitted", naming neither the option nor the fix;
    # a results folder that is not there, or a file, said it "holds no lm-eval results_*.json file"
    for argv, needle in [([str(tmp_path / "a"), "--out", "/proc/longshort_x"], "--out='/proc/longshort_x' cannot be "
                                                                              "created"),
                         ([str(tmp_path / "absent"), "--out", str(tmp_path / "r2")], "absent' does not exist, so it "
                                                                                   "holds no lm-eval results file"),
                         ([str(out / "notes.txt"), "--out", str(tmp_path / "r2")], "notes.txt' is a file but not an "
                                                                                  "lm-eval results file")]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "r2").exists()


def test_a_torn_samples_line_is_skipped_and_a_broken_results_file_named(tmp_path, capsys):
    """A samples file whose line is not JSON (a killed run's) ended the report, after its --out was made, in
    `error: Expecting property name ...` naming no file; now the line is skipped with a warning, and the report
    is written. A results file that is not JSON is refused naming it, before --out is made."""
    rows = [{"curve_mean_nll_3": [1.0, 2.0, 3.0]}, {"curve_mean_nll_3": [3.0, 2.0, 1.0]}]
    _write(tmp_path / "ours", {"longshort_ppl": {"ppl_3,none": 7.0}}, {"longshort_ppl": rows})
    f = tmp_path / "ours" / "samples_longshort_ppl_2026-01-01T00-00-00.jsonl"
    f.write_text(f.read_text() + '{"curve_mean_nll_3": [9.0, \n')
    summary = build_report([tmp_path / "ours"], tmp_path / "rep")
    assert summary["per_position_mean_nll"]["ours"]["3"] == pytest.approx(2.0)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results_2026-01-01T00-00-00.json").write_text('{"results": ')
    with pytest.raises(SystemExit):
        main([str(tmp_path / "bad"), "--out", str(tmp_path / "rep2")])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "results_2026-01-01T00-00-00.json: not a JSON file" in err, err
    assert not (tmp_path / "rep2").exists()


def test_a_cut_off_results_file_is_named_with_what_to_do_with_it(tmp_path, capsys):
    """A run evaluated again into the folder of a cut-off results file (stock lm-eval's, killed) was refused with
    "evaluate that run again, or leave its folder out", and evaluating it again was refused the same way; now the
    line says to move or delete that file, and doing so lets the report read the run."""
    _write(tmp_path / "run", {"longshort_ppl": {"ppl_512,none": 9.25}})
    cut = tmp_path / "run" / "results_2026-01-01T00-00-00.json"
    cut.write_text(cut.read_text()[:12])  # the kill's
    (tmp_path / "run" / "results_2026-01-02T00-00-00.json").write_text(json.dumps({"results": {
        "longshort_ppl": {"ppl_512,none": 8.5}}}))  # the run evaluated again beside it
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "run"), "--out", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.split(": not a JSON file")[0].endswith(str(cut)) and "move or delete it" in err, err
    assert "another --output_path" in err and not (tmp_path / "rep").exists()
    cut.unlink()  # as the line says: the run evaluated again is read
    assert load_results(tmp_path / "run")["longshort_ppl"]["ppl_512"] == 8.5


def test_cut_off_samples_are_said_and_the_curve_is_built_from_the_readable_ones(tmp_path):
    """A samples file a kill or a full disk cut off (a line that is not JSON, or fewer lines than the task
    evaluated) was read as whole: its curve labelled as built from all the samples. The report now names it."""
    rows = [{"curve_mean_nll_3": [1.0, 2.0, 3.0]}, {"curve_mean_nll_3": [3.0, 2.0, 1.0]}]
    d = _run(tmp_path / "ours", 3)
    for cut, text in (("mid-line", json.dumps(rows[0]) + "\n" + json.dumps(rows[1])[:20]),
                      ("line end", "".join(json.dumps(r) + "\n" for r in rows))):  # 2 of the 3 evaluated
        (d / "samples_longshort_ppl_2026-01-01T00-00-00.jsonl").write_text(text)
        summary = build_report([d], tmp_path / cut)
        md = (tmp_path / cut / "report.md").read_text()
        want = 1 if cut == "mid-line" else 2
        assert "Samples of `ours` cut off" in md and f"({want} of 3 samples)" in md, md
        assert summary["samples_cut_off"] == {"ours": [f"{d / 'samples_longshort_ppl_2026-01-01T00-00-00.jsonl'} "
                                                       f"({want} of 3 samples)"]}
    (d / "samples_longshort_ppl_2026-01-01T00-00-00.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows + rows[:1]))
    assert build_report([d], tmp_path / "whole")["samples_cut_off"] == {}


def test_a_report_that_fails_part_way_leaves_nothing_and_its_rerun_works(tmp_path, monkeypatch):
    """A full disk while the report wrote its files (its summary.json, which lists them, comes last): the figures it
    had written blocked the rerun (`holds 'ppl_vs_length.png', which no earlier run there wrote`). What it added goes
    when it fails; an earlier report's files stay."""
    import errno

    from torchtune_longshort.eval.report import build as build_module

    d = _write_and_return(tmp_path / "ours", {"longshort_ppl": {"ppl_512,none": 8.0, "ppl_2k,none": 6.5}})
    out = tmp_path / "rep"
    write = build_module.atomic_write_text

    def disk_full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(build_module, "atomic_write_text", disk_full)  # report.md: after the figures
    with pytest.raises(OSError):
        build_report([d], out)
    assert not out.exists()  # the folder it made goes too (it stayed, empty)
    monkeypatch.setattr(build_module, "atomic_write_text", write)
    build_report([d], out)  # the rerun: not refused
    first = sorted(p.name for p in out.iterdir())
    assert "ppl_vs_length.png" in first and "summary.json" in first
    monkeypatch.setattr(build_module, "atomic_write_text", disk_full)
    with pytest.raises(OSError):
        build_report([d], out)
    assert sorted(p.name for p in out.iterdir()) == first  # an earlier report's files stay


def _write_and_return(d, results):
    _write(d, results)
    return d


def test_a_report_stopped_while_it_writes_leaves_no_folder_it_made(tmp_path, monkeypatch):
    # Ctrl-C / SIGTERM while a report into a new --out (and its new parents) drew its figures: its files were taken
    # back and the folders stayed, empty (`--out new/sub`: new/sub left)
    from torchtune_longshort.eval.report import build as build_module

    d = _write_and_return(tmp_path / "ours", {"longshort_ppl": {"ppl_512,none": 8.0, "ppl_2k,none": 6.5}})
    write = build_module.atomic_write_text

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_module, "atomic_write_text", stopped)
    with pytest.raises(KeyboardInterrupt):
        build_report([d], tmp_path / "new" / "sub")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours"]
    (tmp_path / "mine").mkdir()  # a folder that was there stays, as do its files
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(KeyboardInterrupt):
        build_report([d], tmp_path / "mine" / "rep")
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
    monkeypatch.setattr(build_module, "atomic_write_text", write)
    assert "summary.json" in build_report([d], tmp_path / "new" / "sub")["files"]


def test_a_stopped_report_says_plainly_what_its_out_holds(tmp_path, monkeypatch, capsys):
    # its line read "the files this report added are removed, those it had replaced are whole (new)" whatever --out
    # was, a new one included (removed whole); a stop while it printed report.md (the report written) ended silently
    # on SIGTERM, a KeyboardInterrupt traceback on Ctrl-C. Reference: what --out holds after the stop.
    from torchtune_longshort.eval.report import build as build_module

    d = _write_and_return(tmp_path / "ours", {"longshort_ppl": {"ppl_512,none": 8.0, "ppl_2k,none": 6.5}})
    write = build_module.atomic_write_text

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    def said(out):
        with pytest.raises(SystemExit) as end:
            build_module.main([str(d), "--out", str(out)])
        err = capsys.readouterr().err
        assert end.value.code == 130 and err.count("\n") == 1, err
        return err.split(": interrupted (SIGINT): ", 1)[1]

    monkeypatch.setattr(build_module, "atomic_write_text", stopped)
    assert said(tmp_path / "new" / "sub").startswith(f"nothing is kept: --out '{tmp_path / 'new' / 'sub'}' did not ")
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert said(tmp_path / "mine").startswith(f"--out '{tmp_path / 'mine'}' holds what it held before")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    monkeypatch.setattr(build_module, "atomic_write_text", write)
    files = build_report([d], tmp_path / "rep")["files"]
    monkeypatch.setattr(build_module, "atomic_write_text", stopped)
    assert "the earlier report's files there that it had written again by then hold this report's version" in \
        said(tmp_path / "rep")
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == sorted(files)
    monkeypatch.setattr(build_module, "atomic_write_text", write)
    monkeypatch.setattr(build_module, "print", lambda *a, **k: stopped(), raising=False)  # the report written
    assert said(tmp_path / "rep2") == f"the report is whole in --out '{tmp_path / 'rep2'}'; only its printing " \
                                      "here was cut short\n"
    assert "report.md" in [p.name for p in (tmp_path / "rep2").iterdir()]
