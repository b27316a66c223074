"""The study stopped: a fine-tune that ends while the study is being stopped by Ctrl-C is recorded as interrupted,
whatever its exit code; held stops are delivered once, after the block; Ctrl-C as the pool starts waits for the
first run; SIGTERM or SIGINT to the study or its process group stops its fine-tune subprocess with a save and the
study with one line, and a rerun goes on; the study's lock on its folder. The runs are played by study_helpers' fake
executor (the signalled fine-tune is a real subprocess, stopped_study). Split from test_study_faults.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stopped_study import KEY, alive, fine_tune_pid, kill_left, start_study
from study_helpers import CPU_SMALL, ROOT, FakeExecutor
from test_study_faults import _study

from torchtune_longshort.study.stages import StudyInterrupted


class _CtrlCWhileStarting(FakeExecutor):
    """The fine-tune ``key`` stopped by Ctrl-C while it imports torch: the study's process gets SIGINT, and the
    recipe's process exits 1 with a KeyboardInterrupt traceback (not the 130 of a recipe that saved)."""

    def __init__(self, key: str):
        super().__init__()
        self.key = key

    def __call__(self, argv, log_path, cwd, env, timeout):
        if Path(argv[0]).name == "tune" and log_path.parent.name == self.key:
            os.kill(os.getpid(), signal.SIGINT)
            # the recipe's traceback comes after the study's handler ran (a fixed sleep lost that race on a loaded
            # machine: the main thread had not run the handler 0.5 s later)
            assert self.stopping.wait(60), "the study's SIGINT handler never ran"
            log_path.write_text("Traceback (most recent call last):\nKeyboardInterrupt\n")
            return 1
        return super().__call__(argv, log_path, cwd, env, timeout)


def test_a_fine_tune_stopped_by_ctrl_c_while_it_starts_is_interrupted(tmp_path):
    """Before: its result.json said "failed" (the recipe exited 1), where the README says interrupted."""
    executor = _CtrlCWhileStarting("clex_a0_s0")
    study = _study(tmp_path / "out", executor)
    executor.stopping = study.stopping
    with pytest.raises(StudyInterrupted):
        study.run()
    rec = json.loads((tmp_path / "out" / "runs" / "clex_a0_s0" / "result.json").read_text())
    assert rec["status"] == "interrupted" and rec["stage"] == "train", rec
    # its stage named once (before: 'train: recipe exited with 1: KeyboardInterrupt', and in the study's line
    # '[study] clex_a0_s0: interrupted at train: train: ...')
    assert rec["error"] == "recipe exited with 1: KeyboardInterrupt", rec["error"]
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
                assert self.stopping.wait(60), "the study's stop never came"  # the stop first, then the exit 1
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
    executor = SlowFirst()
    study = _study(tmp_path / "out", executor)
    executor.stopping = study.stopping
    with pytest.raises(BaseException) as e:  # before: the KeyboardInterrupt itself (it would stop pytest)
        study.run()
    assert isinstance(e.value, StudyInterrupted), repr(e.value)
    key, = ran
    rec = json.loads((tmp_path / "out" / "runs" / key / "result.json").read_text())
    assert rec["status"] == "interrupted", rec
    assert [r.name for r in (tmp_path / "out" / "runs").iterdir() if (r / "result.json").exists()] == [key]


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
    # at once: each imports (the group's study fresh, the others forked from the warm zygote: start_study)
    studies = {how: start_study(tmp_path / how, main=how == "group", group=how == "group") for how in hows}
    pids = []
    try:
        pids.append(fine_tune_pid(locked, studies["group"]))  # the group's study in its grid: past the lock
        assert (locked / ".lock").read_text().split()[0] == str(studies["group"].pid)  # taken over
        before = sorted(p.relative_to(locked).as_posix() for p in locked.rglob("*"))
        # through the tests' warm start (its refusal reads the lock, not signals: ~4.5 CPU-s of imports saved)
        second = subprocess.run([sys.executable, "-m", "torchtune_longshort.study", "--config", str(CPU_SMALL),
                                 "--quick", "--out", str(locked), "--repo-root", str(ROOT)], cwd=tmp_path,
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
