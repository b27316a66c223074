"""The study under faults: a report stage that finds its disk full ends in one line (exit 2) and removes what it
wrote, so that its rerun is not refused and the figures' redraw finds no half report to draw; a BABILong marker or an
eval_spec.json cut off counts as absent (generated or evaluated again) instead of failing every run. (The study
stopped by Ctrl-C or a signal: test_study_stops.py.) The runs are played by study_helpers' fake executor (no
training)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from disk_full import needs_unshare, on_small_disk
from killed import killed_after_first_figure
from study_helpers import CPU_SMALL, ROOT, FakeExecutor

import torchtune_longshort.study.figures as study_figures
import torchtune_longshort.study.runner as study_runner
from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.__main__ import main as study_main
from torchtune_longshort.study.figures import main as figures_main
from torchtune_longshort.refusals import fault_line
from torchtune_longshort.study.report import build_report
from torchtune_longshort.study.tables import load_records

PROG = "python -m torchtune_longshort.study"
ARGV = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT)]


def _study(out: Path, executor=None) -> Study:
    cfg = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
    return Study(cfg, output_dir=out, repo_root=ROOT, executor=executor or FakeExecutor(), log=lambda m: None)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished quick study (its runs played by the fake executor) and its report in ``<out>/report``."""
    out = tmp_path_factory.mktemp("study") / "out"
    study = _study(out)
    study.run()
    build_report(out, out / "report", study.cfg)
    return out


def _copy(finished: Path, to: Path, report: bool = True) -> Path:
    shutil.copytree(finished, to, ignore=None if report else shutil.ignore_patterns("report"))
    return to


def _one_error_line(stderr: str, prog: str = PROG) -> str:
    lines = [x for x in stderr.splitlines() if x.startswith(f"{prog}: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


@needs_unshare
def test_a_report_on_a_full_disk_ends_in_one_line_and_its_rerun_goes_on(tmp_path, finished):
    """Before: a traceback (pathlib's write_text, shutil's copy or PIL's savefig) leaving result.json files at 0 B
    or cut off, and the rerun refused: the report folder "holds 'ppl_vs_length.png', 'runs', which no earlier run
    there wrote"."""
    disk = tmp_path / "disk"
    src = _copy(finished, tmp_path / "src", report=False)
    leave_64k = f"head -c $(( $(df -k {disk} | tail -1 | awk '{{print $4}}') * 1024 - 65536 )) /dev/zero > {disk}/fill"
    script = (f"cp -a {src} {disk / 'out'} && {leave_64k}; {sys.executable} -m torchtune_longshort.study "
              f"{' '.join(ARGV)} --out {disk / 'out'} --report-only; echo '#rc' $?; ls -A {disk / 'out'}; "
              f"cp -a {disk / 'out'} {tmp_path / 'after'}")
    p = on_small_disk(disk, "3m", script, TMPDIR=tmp_path)
    assert "#rc 2" in p.stdout, p.stdout + p.stderr[-3000:]
    line = _one_error_line(p.stderr)
    assert f"no space left on the disk writing {disk / 'out' / 'report'}/" in line, line
    assert "report" not in p.stdout.split("#rc 2", 1)[1].split()  # what it wrote is removed
    after = tmp_path / "after"
    assert study_main(ARGV + ["--out", str(after), "--report-only"]) == 0  # not refused
    assert json.loads((after / "report" / "summary.json").read_text())["runs"]["base"]["status"] == "ok"


def test_a_report_that_fails_part_way_removes_what_it_wrote(tmp_path, finished, monkeypatch, capsys):
    out = _copy(finished, tmp_path / "out", report=False)
    save, calls = study_figures.save_figure, []

    def disk_full_at_the_second(fig, path, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(path))
        save(fig, path, **kwargs)

    monkeypatch.setattr(study_figures, "save_figure", disk_full_at_the_second)
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 2
    assert f"no space left on the disk writing {calls[1]}" in _one_error_line(capsys.readouterr().err)
    assert not (out / "report").exists()  # the records and the first figure it wrote are gone with the folder
    # over an earlier report: the files it added are removed, those it replaced stay whole, the rerun goes on
    shutil.copytree(finished / "report", out / "report")
    (out / "report" / "ppl_vs_length.png").unlink()
    (out / "report" / "runs" / "clex_a0_s0" / "lm_eval_results.json").unlink()
    calls.clear()
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 2
    assert not (out / "report" / "ppl_vs_length.png").exists()
    assert not (out / "report" / "runs" / "clex_a0_s0" / "lm_eval_results.json").exists()
    assert not list((out / "report").rglob("*.tmp"))
    monkeypatch.setattr(study_figures, "save_figure", save)
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 0
    assert (out / "report" / "ppl_vs_length.png").is_file()


def test_the_figures_redraw_refuses_a_report_cut_off(tmp_path, finished, capsys):
    """Before: a JSONDecodeError traceback from a record cut off, and exit 0 "redrew N figure(s)" from a report that
    stopped before its summary.json (runs missing)."""
    prog = "python -m torchtune_longshort.study.figures"
    report = _copy(finished / "report", tmp_path / "report")
    argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT), "--report", str(report)]
    record = report / "runs" / "clex_a0_s0" / "result.json"
    record.write_text(record.read_text()[:100])
    assert figures_main(argv) == 2
    line = _one_error_line(capsys.readouterr().err, prog)
    assert f"{record} is not a whole run record" in line, line
    (report / "summary.json").unlink()
    shutil.rmtree(report / "runs" / "clex_a0.3_s0")
    assert figures_main(argv) == 2
    assert "holds no finished study report" in _one_error_line(capsys.readouterr().err, prog)


def test_a_run_record_cut_off_is_a_failed_run_and_the_report_goes_on(tmp_path, finished, capsys):
    """Before: --report-only refused the whole study in one line, "<record> is not a whole run record", for one
    run's result.json cut off (a kill, a full disk), so no report showed the runs that had finished. Now that run is
    failed in the report, its error naming the file and how to run it again; the others are reported (exit 1, as a
    failed run), and the report's copy of its record is whole, so the figures' redraw reads it."""
    out = _copy(finished, tmp_path / "out")
    record = out / "runs" / "clex_a0_s0" / "result.json"
    record.write_text(record.read_text()[:100])
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 1
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err and "1 failed: clex_a0_s0" in printed.out, printed
    summary = json.loads((out / "report" / "summary.json").read_text())
    runs = summary["runs"]
    assert runs["clex_a0_s0"]["status"] == "failed" and {r["status"] for k, r in runs.items() if k != "clex_a0_s0"} \
        == {"ok"}, runs
    report = (out / "report" / "report.md").read_text()
    assert f"{record} is not a whole run record" in report and "without --report-only runs it again" in report
    copy = json.loads((out / "report" / "runs" / "clex_a0_s0" / "result.json").read_text())
    assert copy["status"] == "failed" and copy["stage"] == "record", copy
    argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT), "--report", str(out / "report")]
    assert figures_main(argv) == 0


def test_a_rerun_whose_record_finds_the_disk_full_leaves_no_earlier_record_read_as_its(tmp_path, finished,
                                                                                        monkeypatch):
    """A run of an earlier config (its result.json ok, another spec) done again, on a disk that is full when its
    record is written: before, the earlier result.json stayed and the report read its figures as this run's ("ok").
    Now the earlier record is gone before the run starts: the run is "not run" (the study's rerun does it), the study
    ends on the disk-full error naming the record it could not write, and the other runs' records are untouched.
    Reference: the kernel's ENOSPC (``errno``, ``os.strerror``)."""
    out = _copy(finished, tmp_path / "out", report=False)
    record = out / "runs" / "clex_a0_s0" / "result.json"
    rec = json.loads(record.read_text())
    rec["spec"]["eval_tasks"] = ["an earlier config's task"]
    record.write_text(json.dumps(rec))
    others = {p: p.read_bytes() for p in out.glob("*/*/result.json") if p != record}
    others.update({p: p.read_bytes() for p in out.glob("base/result.json")})

    def disk_full_at_a_record(path, *args, **kwargs):
        if Path(path).name == "result.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, *args, **kwargs)

    real = study_runner.atomic_write_json
    monkeypatch.setattr(study_runner, "atomic_write_json", disk_full_at_a_record)
    with pytest.raises(OSError) as e:
        _study(out).run()
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(record)
    assert f"writing {record} " in fault_line(e.value)
    assert not record.exists()
    assert load_records(out, _study(out).cfg)["clex_a0_s0"]["status"] == "not run"
    assert {p: p.read_bytes() for p in others} == others


def test_the_figures_redraw_takes_a_shipped_config_name_as_the_study_does(tmp_path, finished, monkeypatch, capsys):
    """Before: `--config study/cpu_small.yaml` (the name the study itself was run with, from a wheel) was read as a
    path only: "study config '<cwd>/study/cpu_small.yaml' does not exist", exit 2."""
    report = _copy(finished / "report", tmp_path / "report")
    monkeypatch.chdir(tmp_path)  # no configs/ here: the name is found among the package's shipped configs
    assert figures_main(["--config", "study/cpu_small.yaml", "--quick", "--report", str(report)]) == 0
    assert "redrew" in capsys.readouterr().out
    assert figures_main(["--config", "study/cpu_smal.yaml", "--quick", "--report", str(report)]) == 2
    prog = "python -m torchtune_longshort.study.figures"
    assert "longshort-cp --list" in _one_error_line(capsys.readouterr().err, prog)


def test_the_figures_redraw_filters_the_upstream_noise_as_the_study_does(tmp_path, monkeypatch, capsys):
    """Before: `python -m torchtune_longshort.study.figures` printed torchao's "Skipping import of cpp extensions"
    line when the config check imported torchtune (the study's own entry point filters it), above its one-line
    refusal too. It installs the same filters now."""
    import logging
    import warnings

    from torchtune_longshort import _quiet

    monkeypatch.setattr(_quiet, "_installed", False)
    for name in _quiet.LOG_FILTERS:  # this process's filters as a fresh interpreter has them: none
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    with warnings.catch_warnings():
        assert figures_main(["--config", "study/cpu_small.yaml", "--quick", "--report", str(tmp_path)]) == 2
    assert "holds no finished study report" in capsys.readouterr().err
    noise = logging.LogRecord("torchao", logging.WARNING, __file__, 1, "Skipping import of cpp extensions due to "
                              "incompatible torch version", None, None)
    assert not logging.getLogger("torchao").filter(noise)


def test_a_cut_off_babilong_marker_or_eval_spec_counts_as_absent(tmp_path, finished):
    """Before: every run failed at eval with "Expecting value: line 1 column 1 (char 0)", naming no file, on every
    rerun, until the user found and deleted the file."""
    out = _copy(finished, tmp_path / "out")
    (out / "babilong_data" / "DONE.json").write_text("")
    for key in ("clex_a0_s0", "clex_a0.3_s0"):
        (out / "runs" / key / "eval_spec.json").write_text('{"checkpoint": ')
        (out / "runs" / key / "result.json").unlink()  # the runs are done again
    ex = FakeExecutor()
    recs = _study(out, ex).run()
    assert {k: r["status"] for k, r in recs.items()} == {k: "ok" for k in recs}, recs
    assert sum("torchtune_longshort.eval.tasks.babilong.generator" in a for a in ex.calls) == 1  # generated again
    assert sum("torchtune_longshort.eval" in a and "run" in a for a in ex.calls) == 2  # both evaluated again
    assert json.loads((out / "babilong_data" / "DONE.json").read_text())["lengths"]
    assert all(json.loads((out / "runs" / k / "eval_spec.json").read_text()) for k in ("clex_a0_s0", "clex_a0.3_s0"))


def test_a_babilong_data_file_gone_since_it_was_generated_is_generated_again(tmp_path):
    """Before: DONE.json was trusted alone; every later evaluation scored the task NaN ("data file not found") and
    the run was recorded ok, on every rerun, until the user deleted the marker."""
    out = tmp_path / "out"
    _study(out).run()
    data = out / "babilong_data"
    (data / "1k" / "qa1.jsonl").unlink()
    for name in ("result.json", "eval_spec.json"):  # the run evaluated again (an evaluation killed)
        (out / "runs" / "clex_a0_s0" / name).unlink()
    ex = FakeExecutor()
    recs = _study(out, ex).run()
    assert all(r["status"] == "ok" for r in recs.values()), recs
    assert sum("torchtune_longshort.eval.tasks.babilong.generator" in a for a in ex.calls) == 1
    assert (data / "1k" / "qa1.jsonl").is_file()


def test_a_report_killed_part_way_is_not_refused_by_its_rerun(tmp_path, finished):
    """SIGKILL after the report's run records and first figure (no Python left to remove them): the rerun refused
    the folder, "holds 'runs', '....png', which no earlier run there wrote". The names are recorded before each
    file appears (output_guard.WRITING)."""
    out = _copy(finished, tmp_path / "out", report=False)
    killed_after_first_figure(
        "torchtune_longshort.study.figures",
        "from pathlib import Path\nfrom torchtune_longshort.study import load_study_config\n"
        "from torchtune_longshort.study.report import build_report\nout, config, root = map(Path, sys.argv[1:])\n"
        "build_report(out, out / 'report', load_study_config(config, quick=True, repo_root=root))",
        out, CPU_SMALL, ROOT)
    assert list((out / "report").glob("*.png"))
    assert not (out / "report" / "summary.json").exists()
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 0
    assert json.loads((out / "report" / "summary.json").read_text())["runs"]["base"]["status"] == "ok"
    assert not (out / "report" / ".longshort_writing").exists()


def test_a_relative_out_is_read_from_the_working_directory_as_the_report_dir_is(tmp_path, finished, monkeypatch):
    """Before: a relative --out was read from --repo-root, a relative --report-dir from the working directory: with
    `--repo-root CHECKOUT --out rel` the study wrote (or, --report-only, read) CHECKOUT/rel."""
    root, cwd = tmp_path / "root", tmp_path / "cwd"
    root.mkdir()
    _copy(finished, cwd / "rel", report=False)
    monkeypatch.chdir(cwd)
    argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(root), "--out", "rel", "--report-only"]
    assert study_main(argv) == 0
    assert (cwd / "rel" / "report" / "report.md").is_file() and list(root.iterdir()) == []


def test_a_tilde_in_a_folder_option_is_the_home_folder(tmp_path, monkeypatch, capsys):
    """Before: `--out=~/studies/x` (no shell expands a tilde after "=") was read as a folder named "~" in the working
    directory: --report-only looked in <cwd>/~/studies/x, and a run would have made it there."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert study_main(ARGV + ["--out=~/studies/x", "--report-only"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert repr(str(tmp_path / "home" / "studies" / "x")) in line and "/~/" not in line, line
    assert not (tmp_path / "~").exists()


def test_without_matplotlib_a_study_is_refused_before_it_trains_and_its_report_has_its_tables(tmp_path, finished,
                                                                                               monkeypatch, capsys):
    """An environment where matplotlib cannot be imported (a declared dependency: only a broken one) ended the
    report in a traceback, after the whole grid had trained. Now a study is refused in one line before anything
    runs or is written; --report-only writes the tables, summary.json and the runs' records, says in one line (and
    in report.md) that no plot was drawn and how to draw them; the figures' redraw is refused in one line. With
    matplotlib, the last line names every plot the report wrote (the eval report names its files)."""
    out = _copy(finished, tmp_path / "out", report=False)
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
        assert study_main(ARGV + ["--out", str(tmp_path / "new")]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert "matplotlib cannot be imported" in line and "`pip install matplotlib`" in line, line
        assert not (tmp_path / "new").exists()
        assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 0
        printed = capsys.readouterr()
        said = [x for x in printed.err.splitlines() if "matplotlib" in x]
        assert len(said) == 1 and "pip install matplotlib" in said[0] and "Traceback" not in printed.err, said
        assert printed.out.splitlines()[-1].startswith(f"[study] report: {out / 'report' / 'report.md'}, "
                                                       "summary.json; no plots")
        assert sorted(p.name for p in (out / "report").iterdir()) == ["report.md", "runs", "summary.json"]
        summary = json.loads((out / "report" / "summary.json").read_text())
        assert summary["plots"] == [] and summary["tables"]["ppl"]
        assert "No plots: matplotlib cannot be imported" in (out / "report" / "report.md").read_text()
        argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT), "--report", str(out / "report")]
        assert figures_main(argv) == 2
        assert "matplotlib cannot be imported" in _one_error_line(capsys.readouterr().err,
                                                                  "python -m torchtune_longshort.study.figures")
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 0  # matplotlib back: the plots are drawn
    plots = json.loads((out / "report" / "summary.json").read_text())["plots"]
    assert plots and all((out / "report" / p).is_file() for p in plots)
    last = capsys.readouterr().out.splitlines()[-1]
    assert f"plots in {out / 'report'}: {', '.join(plots)}" in last, last


def test_a_users_png_named_like_a_plot_the_earlier_report_did_not_draw_is_refused_and_kept(tmp_path, finished,
                                                                                            capsys):
    """Once an earlier summary.json was there, every PNG in the report folder was taken for the study's: a rerun that
    drew finetune_convergence.png overwrote the user's file of that name. Only the plots summary.json lists are."""
    out = _copy(finished, tmp_path / "out")
    assert "finetune_convergence.png" not in json.loads((out / "report" / "summary.json").read_text())["plots"]
    mine = out / "report" / "finetune_convergence.png"
    mine.write_text("the user's own figure")
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "holds 'finetune_convergence.png', which no earlier run there wrote: refusing to overwrite" in line
    assert mine.read_text() == "the user's own figure"
    # the figures-only redraw asks the same check (before: it drew over the user's file and said "redrew ...")
    redraw = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT), "--report", str(out / "report")]
    assert figures_main(redraw) == 2
    line = _one_error_line(capsys.readouterr().err, "python -m torchtune_longshort.study.figures")
    assert "--report=" in line and "holds 'finetune_convergence.png', which no earlier run there wrote" in line
    assert mine.read_text() == "the user's own figure"
    mine.unlink()  # the earlier report's own plots are still its: the rerun goes on
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 0
    # a plot a redraw draws that the report did not list (a report made before that figure) is listed from then on:
    # the next redraw takes it as the report's own
    summary = json.loads((out / "report" / "summary.json").read_text())
    first, *rest = summary["plots"]
    (out / "report" / "summary.json").write_text(json.dumps({**summary, "plots": rest}))
    (out / "report" / first).unlink()
    # a PNG of no plot's name (a maintainer's alpha_curves_before.png kept beside a redrawn report, as
    # docs/study/cpu_medium holds) is none of the report's: it stays, and neither the redraw nor a rerun refuses it
    before = out / "report" / "alpha_curves_before.png"
    before.write_text("an older figure")
    assert figures_main(redraw) == 0 and figures_main(redraw) == 0
    assert first in json.loads((out / "report" / "summary.json").read_text())["plots"]
    assert study_main(ARGV + ["--out", str(out), "--report-only"]) == 0 and before.read_text() == "an older figure"
    # every plot the report lists is one of the names its folder check knows (report_folder.PLOTS)
    from torchtune_longshort.study.report_folder import PLOTS

    assert set(json.loads((out / "report" / "summary.json").read_text())["plots"]) <= set(PLOTS)


def test_every_plot_name_is_drawn_under_report_folder_plots_and_spelled_there_alone(tmp_path, monkeypatch):
    """The folder check knows a report's plots by report_folder.PLOTS; the drawing modules spelled the 11 names again,
    so a renamed figure left the check guarding a name nothing draws. With every figure's condition met (builders
    stubbed, nothing drawn), write_plots + claim_plots save exactly PLOTS, and no other study module spells one."""
    from types import SimpleNamespace as NS

    import torchtune_longshort.study.claim_figures as claim_figures
    from torchtune_longshort.study.eval_config import FAMILY_TASK
    from torchtune_longshort.study.report_folder import PLOTS

    saved = []
    for mod, builders in ((study_figures, ("line_figure", "babilong_figure", "passkey_figure", "finetune_curve_figure",
                                           "curve_figure")),
                          (claim_figures, ("base_figure", "scatter_figure", "alpha_figure", "e_range_figure",
                                           "divergence_figure"))):
        monkeypatch.setattr(mod, "save_figure", lambda fig, path, dpi: saved.append(path.name))
        for b in builders:
            monkeypatch.setattr(mod, b, lambda *a, **k: None)
    ev = NS(ppl_lengths=[64], misalignment_lengths=[64], babilong_lengths=[64], babilong=NS(depths=[0.5]),
            passkey_lengths=[64])
    cfg = NS(eval=ev, alphas=[0.1, 0.3])
    recs = {"base": {"results": {FAMILY_TASK["passkey"]: {}}, "curves": {"64": []}}, "a": {"train": {"val_ce": [1]}}}
    claims = [{"id": "table1", "correlations": [1]}, {"id": "table7", "comparisons": [1]},
              {"id": "divergence", "comparisons": [1]}]
    made = study_figures.write_plots(cfg, {"ppl": [1], "misalignment": [1]}, recs, tmp_path)
    made += claim_figures.claim_plots(cfg, {"base_failure": {"x": 1}, "claims": claims}, recs, tmp_path)
    assert made == saved and sorted(made) == sorted(PLOTS) and len(PLOTS) == 11
    for src in (ROOT / "torchtune_longshort" / "study").glob("*.py"):
        if src.name != "report_folder.py":
            text = src.read_text()
            assert not [p for p in PLOTS if f'"{p}"' in text or f"`{p}`" in text], src.name
