"""The study under faults: a report stage that finds its disk full ends in one line (exit 2) and removes what it
wrote, so that its rerun is not refused and the figures' redraw finds no half report to draw; a BABILong marker or an
eval_spec.json cut off counts as absent (generated or evaluated again) instead of failing every run; a fine-tune that
ends while the study is being stopped by Ctrl-C is recorded as interrupted, whatever its exit code; SIGTERM or SIGINT to
the study or its process group stops its fine-tune subprocess with a save and the study with one line. The runs are
played by study_helpers' fake executor (no training; the signalled fine-tune is a real subprocess, stopped_study)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from disk_full import needs_unshare, on_small_disk
from killed import killed_after_first_figure
from stopped_study import KEY, alive, fine_tune_pid, kill_left, start_study
from study_helpers import CPU_SMALL, ROOT, FakeExecutor

import torchtune_longshort.study.figures as study_figures
from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.__main__ import main as study_main
from torchtune_longshort.study.figures import main as figures_main
from torchtune_longshort.study.report import build_report
from torchtune_longshort.study.stages import StudyInterrupted

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

class _CtrlCWhileStarting(FakeExecutor):
    """The fine-tune ``key`` stopped by Ctrl-C while it imports torch: the study's process gets SIGINT, and the
    recipe's process exits 1 with a KeyboardInterrupt traceback (not the 130 of a recipe that saved)."""

    def __init__(self, key: str):
        super().__init__()
        self.key = key

    def __call__(self, argv, log_path, cwd, env, timeout):
        if Path(argv[0]).name == "tune" and log_path.parent.name == self.key:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
            log_path.write_text("Traceback (most recent call last):\nKeyboardInterrupt\n")
            return 1
        return super().__call__(argv, log_path, cwd, env, timeout)


def test_a_fine_tune_stopped_by_ctrl_c_while_it_starts_is_interrupted(tmp_path):
    """Before: its result.json said "failed" (the recipe exited 1), where the README says interrupted."""
    study = _study(tmp_path / "out", _CtrlCWhileStarting("clex_a0_s0"))
    with pytest.raises(StudyInterrupted):
        study.run()
    rec = json.loads((tmp_path / "out" / "runs" / "clex_a0_s0" / "result.json").read_text())
    assert rec["status"] == "interrupted" and rec["stage"] == "train", rec
    assert not (tmp_path / "out" / "runs" / "clex_a0.3_s0" / "result.json").exists()  # the grid stopped


def test_stops_held_delivers_each_stop_once_after_the_block_to_the_handler_in_place():
    from torchtune_longshort.output_guard import stops_held

    got = []

    def handler(signum, frame):
        got.append(signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt

    before = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(KeyboardInterrupt):
            with stops_held():
                for s in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):
                    os.kill(os.getpid(), s)
                time.sleep(0.05)  # a handler would have run by now
                inside = list(got)
        assert inside == [] and got == [signal.SIGTERM, signal.SIGINT]  # in the order they came, each once
        assert signal.getsignal(signal.SIGINT) is handler and signal.getsignal(signal.SIGTERM) is handler
        with stops_held():  # no stop: nothing delivered
            pass
        assert got == [signal.SIGTERM, signal.SIGINT]
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def test_ctrl_c_as_the_pool_starts_the_first_runs_thread_waits_for_that_run(tmp_path, monkeypatch):
    """Ctrl-C that reached the main thread while the thread pool's ``submit`` had started the first run's thread but
    not registered it: the KeyboardInterrupt left the pool without waiting for that run (the study ended first, its
    run went on alone). Now the stop is held until every thread is known (``output_guard.stops_held``): the study waits
    for the run, records it as interrupted and starts no other."""
    import threading

    started, ran = threading.Event(), []

    class SlowFirst(FakeExecutor):
        def __call__(self, argv, log_path, cwd, env, timeout):
            if threading.current_thread().name.startswith("ThreadPoolExecutor") and not ran:
                ran.append(log_path.parent.name)  # the first command of the first run, stopped by the Ctrl-C
                started.set()
                time.sleep(0.5)
                log_path.parent.mkdir(parents=True, exist_ok=True)
                log_path.write_text("Traceback (most recent call last):\nKeyboardInterrupt\n")
                return 1
            return super().__call__(argv, log_path, cwd, env, timeout)

    start = threading.Thread.start

    sent = []

    def start_then_ctrl_c(thread):
        start(thread)
        if thread.name.startswith("ThreadPoolExecutor") and not sent:  # the first one only
            sent.append(thread.name)
            assert started.wait(30)
            os.kill(os.getpid(), signal.SIGINT)  # Python's handler raises here, in the main thread, inside submit

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    study = _study(tmp_path / "out", SlowFirst())
    with pytest.raises(BaseException) as e:  # before: the KeyboardInterrupt itself (it would stop pytest)
        study.run()
    assert isinstance(e.value, StudyInterrupted), repr(e.value)
    key, = ran
    rec = json.loads((tmp_path / "out" / "runs" / key / "result.json").read_text())
    assert rec["status"] == "interrupted", rec
    assert [r.name for r in (tmp_path / "out" / "runs").iterdir() if (r / "result.json").exists()] == [key]


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



def test_a_signal_stops_the_study_and_its_fine_tune_and_a_rerun_goes_on(tmp_path):
    """Real study processes and their real fine-tune subprocesses, stopped mid-fine-tune by SIGTERM to the process
    group, SIGTERM to the study alone, SIGINT to the study alone. Before: SIGTERM to the group killed the study at once
    (exit -15, no line, no `interrupted` record); SIGTERM to the study alone killed it and left its fine-tune training
    in the background; SIGINT to it alone left the fine-tune training and the study waiting for it. Now the study
    forwards the signal (the fine-tune saves its step and exits 128 + the signal; the same one also got from the
    group is the same stop), records the run as interrupted, starts nothing more and exits 128 + the signal with one
    line; a rerun resumes the run from the step saved.

    The study's lock on its folder, on the one stopped through its process group (the whole command, its checks and
    lock included). Before: nothing kept a second study out, and both wrote the same runs. Now a study killed by
    SIGKILL leaves its lock (naming a process that is gone) and the next study takes it over; while that one runs, a
    second study on the same folder is refused, exit 2, in one line naming the folder and the holder's PID, having
    written nothing there; the lock is given back when the study ends, by a signal too."""
    hows = {"group": signal.SIGTERM, "study": signal.SIGTERM, "study, Ctrl-C": signal.SIGINT}
    locked = tmp_path / "group"
    dead = subprocess.run([sys.executable, "-c", KILLED_HOLDER, str(locked)], capture_output=True, text=True)
    assert dead.returncode == 0 and not alive(int(dead.stdout)), dead.stderr  # a study killed with its lock held
    studies = {how: start_study(tmp_path / how, main=how == "group") for how in hows}  # at once: each imports
    pids = []
    try:
        pids.append(fine_tune_pid(locked, studies["group"]))  # the group's study in its grid: past the lock
        assert (locked / ".lock").read_text().split()[0] == str(studies["group"].pid)  # taken over
        before = sorted(p.relative_to(locked).as_posix() for p in locked.rglob("*"))
        env = {**os.environ, "LONGSHORT_TEST_FRESH": "1"}
        second = subprocess.run([sys.executable, "-m", "torchtune_longshort.study", "--config", str(CPU_SMALL),
                                 "--quick", "--out", str(locked), "--repo-root", str(ROOT)], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        line = second.stderr.strip()
        assert "\n" not in line and "Traceback" not in line and not second.stdout.strip(), second.stdout + line
        assert f"{str(locked)!r} is in use by another study (PID {studies['group'].pid}" in line, line
        assert sorted(p.relative_to(locked).as_posix() for p in locked.rglob("*")) == before
        for how in ("study", "study, Ctrl-C"):
            pids.append(fine_tune_pid(tmp_path / how, studies[how]))
        for how, study in studies.items():
            (os.killpg if how == "group" else os.kill)(study.pid, hows[how])
        for (how, study), pid in zip(studies.items(), pids):
            _, err = study.communicate(timeout=30)
            assert study.returncode == 128 + hows[how], (how, study.returncode, err[-3000:])
            lines = [x for x in err.splitlines() if "[study] interrupted" in x]
            assert len(lines) == 1 and lines[0].startswith(f"[study] interrupted ({hows[how].name}") \
                and "Traceback" not in err, (how, err[-3000:])
            assert not alive(pid), how  # waited for, not left training
            runs = tmp_path / how / "runs"
            got = (runs / KEY / "train" / "signals").read_text().split()
            assert set(got) == {hows[how].name} and len(got) <= (2 if how == "group" else 1), (how, got)
            rec = json.loads((runs / KEY / "result.json").read_text())
            assert rec["status"] == "interrupted" and rec["stage"] == "train", (how, rec)
            assert not (runs / "clex_a0.3_s0" / "result.json").exists(), how  # the grid stopped
        assert not (locked / ".lock").exists()  # given back
    finally:
        kill_left(pids)
        for study in studies.values():
            if study.poll() is None:
                os.killpg(study.pid, signal.SIGKILL)
    ex = FakeExecutor()  # the same command goes on: the run resumed from its step, the grid finished
    recs = _study(tmp_path / "study", ex).run()
    assert {k: r["status"] for k, r in recs.items()} == {k: "ok" for k in recs}, recs
    assert [a for a in ex.calls if KEY in " ".join(a) and "resume=True" in a], ex.calls


# what a study killed by SIGKILL leaves: its lock, written by the lock's own code, its holder gone
KILLED_HOLDER = """
import os, sys
from torchtune_longshort.training.output_dir import OutputDirLock
OutputDirLock(sys.argv[1], field="--out (or the config's output_dir)", holder="study").acquire()
print(os.getpid(), flush=True)
os._exit(0)
"""


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
