"""A study stopped by a real signal while a fine-tune runs, in real processes: the study's process runs the quick grid
(its base and evaluations played by study_helpers' fake executor) and starts the fine-tune ``clex_a0_s0`` as a real
subprocess that stops as the recipe does (on SIGINT / SIGTERM it finishes its step, saves ``step_1`` and exits 128 +
the signal; it records every signal it got). :func:`start_study` starts it in a session of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from study_helpers import ROOT
from warm_start import with_warm_start

KEY = "clex_a0_s0"

RECIPE = """
import os, signal, sys, time
from pathlib import Path
out, got = Path(sys.argv[1]), []
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, lambda n, f: got.append(n))
out.mkdir(parents=True, exist_ok=True)
(out / "pid").write_text(str(os.getpid()))  # training: the test signals now
t0 = time.monotonic()
while not got and time.monotonic() - t0 < 60:
    time.sleep(0.02)
time.sleep(0.3)  # the step in progress ends (a signal repeated meanwhile is the same stop)
(out / "step_1").mkdir()
(out / "step_1" / "config.json").write_text("{}")
(out / "signals").write_text(" ".join(signal.Signals(n).name for n in got))
sys.exit(128 + got[0] if got else 0)
"""

STUDY = """
import sys
from pathlib import Path
import yaml
from study_helpers import CPU_SMALL, ROOT, FakeExecutor
from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.__main__ import _run
from torchtune_longshort.study.stages import run_command

class Recipe(FakeExecutor):
    def __call__(self, argv, log_path, cwd, env, timeout):
        if Path(argv[0]).name == "tune" and log_path.parent.name == %(key)r:
            out = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())["output_dir"]
            return run_command([sys.executable, "-c", %(recipe)r, out], log_path, cwd, env, timeout)
        return super().__call__(argv, log_path, cwd, env, timeout)

if sys.argv[2:] == ["main"]:  # the whole command (its checks and lock included), the executor this one
    import torchtune_longshort.study.__main__ as study_main

    class Held(Study):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "executor": Recipe()})

    study_main.Study = Held
    sys.exit(study_main.main(["--config", str(CPU_SMALL), "--quick", "--out", sys.argv[1], "--repo-root", str(ROOT)]))
cfg = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
study = Study(cfg, output_dir=sys.argv[1], repo_root=ROOT, executor=Recipe(), log=print)
sys.exit(_run(study, None) or 0)
""" % {"key": KEY, "recipe": RECIPE}


def start_study(out: Path, main: bool = False, group: bool = False) -> subprocess.Popen:
    """The study's process (a session of its own). ``main``: through the command's ``main`` (its checks, its
    pre-flight and its lock on ``out``), not the grid alone. ``group``: the test signals its process group, so it
    starts fresh (not through the tests' warm-start relay, whose forked job and the job's subprocesses live in the
    zygote's group) and its fine-tune is in its group as a user's would be; a signal to the study alone reaches the
    forked study through the relay as it would the process itself (~5 CPU-s of imports saved a study)."""
    path = os.pathsep.join([str(Path(__file__).parent), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "LONGSHORT_TEST_FRESH": "1", "PYTHONPATH": path} if group else \
        {**os.environ, "PYTHONPATH": with_warm_start(path)}
    return subprocess.Popen([sys.executable, "-c", STUDY, str(out), *(["main"] if main else [])], cwd=ROOT, env=env,
                            start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def fine_tune_pid(out: Path, study: subprocess.Popen, timeout: float = 60) -> int:
    """The fine-tune's pid once it trains (its signal handlers installed)."""
    pid_file = out / "runs" / KEY / "train" / "pid"
    t0 = time.monotonic()
    while not (pid_file.is_file() and pid_file.read_text()):
        assert study.poll() is None and time.monotonic() - t0 < timeout, study.communicate()
        time.sleep(0.05)
    return int(pid_file.read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie: ended, not yet reaped


def kill_left(pids) -> None:
    """What a failed test left running (a fine-tune the study did not stop)."""
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
