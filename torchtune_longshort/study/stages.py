"""The study's stages as subprocesses: how one runs, how its failure is told (``StageError`` with its log's tail),
and which recipe checkpoints a training folder holds."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from torchtune_longshort.disk_space import naming
from torchtune_longshort.eval.report.results_io import load_results
from torchtune_longshort.made_folders import missing_root
from torchtune_longshort.output_guard import atomic_write_text
from torchtune_longshort.study.stop import StudySignal, ends_with_study, received, running
from torchtune_longshort.training.checkpointing import STEP_PATTERN
from torchtune_longshort.training.metrics import metric_lines
from torchtune_longshort.training.output_dir import OutputDirLock


class StageError(RuntimeError):
    """A subprocess stage failed; ``log_tail`` holds the end of its log."""

    def __init__(self, stage: str, message: str, log_tail: str = ""):
        super().__init__(f"{stage}: {message}")
        self.stage, self.message, self.log_tail = stage, message, log_tail


class StudyInterrupted(Exception):
    """A stage was stopped by SIGINT or SIGTERM (one to the study reaches its subprocess too: from the process group,
    or forwarded, :mod:`~torchtune_longshort.study.stop`): the study stops its grid instead of recording a failure
    and going on, and exits 128 + ``signum`` (the signal that stopped the stage; 0: not known)."""

    def __init__(self, message: str, signum: int = 0, name: str = "") -> None:
        super().__init__(message)
        self.signum, self.name = signum, name  # name: the program ``message`` starts with (run_command's)

    def named(self, name: str) -> "StudyInterrupted":
        """The same stop told with ``name`` for the program (:func:`run_stage`); one told without a name as is."""
        if not self.name or not str(self).startswith(self.name):
            return self
        return StudyInterrupted(name + str(self)[len(self.name):], self.signum, name)


# The one name each stage's program is told by, whether it failed, was killed or was stopped (exit_words and
# run_stage read it; run_command, which knows no stage, names a command by its command line)
PROGRAMS = {"train": "recipe", "eval": "lm-eval", "babilong_data": "generator"}


# what a subprocess ended by SIGINT / SIGTERM exits with: the recipe's 128 + signal after it saved, or -signal
_STOPPED = {130: signal.SIGINT, 143: signal.SIGTERM, -2: signal.SIGINT, -15: signal.SIGTERM}


def stopped_words(name: str, signum: int, rc: int) -> str:
    """How a stage stopped by ``signum`` is told, one way whether it exited itself (130, 143) or the signal killed it
    (Popen's -2, -15): ``<name> stopped by SIGTERM (exit 143)``, the exit status as a shell gives it. A signal that
    is no stop (SIGKILL: the out-of-memory killer's, or ``kill -9``) killed it: ``<name> killed by SIGKILL (exit 137;
    out of memory? see dmesg)``."""
    status = 128 - rc if rc < 0 else rc
    if signum in (signal.SIGINT, signal.SIGTERM):
        return f"{name} stopped by {signal.Signals(signum).name} (exit {status})"
    hint = "; out of memory? see dmesg" if signum == signal.SIGKILL else ""
    return f"{name} killed by {signal.Signals(signum).name} (exit {status}{hint})"


def exit_words(stage: str, rc: int) -> str:
    """How ``stage`` that ended non-zero is told, by its program's name (:data:`PROGRAMS`): ``recipe exited with 1``,
    or, killed by a signal (Popen's -signal), :func:`stopped_words`' ``recipe killed by SIGKILL (exit 137; ...)``."""
    name = PROGRAMS[stage]
    if rc < 0 and -rc in signal.valid_signals():
        return stopped_words(name, -rc, rc)
    return f"{name} exited with {rc}"


# one state of a tqdm bar, its description and postfix included ('longshort:  33%|###3      | 2/6 [00:00<00:01,
# 3.32it/s, e=48, loss=6.0713]', or 'runs: 0it [00:00, ?it/s]') and the spaces tqdm pads a redraw shorter than the
# one before with; a line printed after it without a newline follows
_TQDM_BAR = re.compile(r"(?:[^\s|][^|]*?: *)?(?:\d{1,3}%\|[^|]*\| *\S+|\S+it) \[[^\]]*(?:it/s|s/it)[^\]]*\] *")


def log_tail(path: Path, n: int = 25) -> str:
    """The last ``n`` lines of a stage's log that say something: tqdm's redraws (a fine-tune's bar, with its
    postfix of loss values, redrawn twice a step) taken out, the text a line holds besides them kept."""
    if not path.is_file():
        return ""
    lines = path.read_text(errors="replace").replace("\r", "\n").splitlines()
    lines = [_TQDM_BAR.sub("", x) for x in lines]
    return "\n".join([x for x in lines if x.strip()][-n:])


ATTEMPT_HEADER = "--- attempt "  # the line each attempt's section of a stage's log starts with


def _stamp(t: float) -> str:
    return time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))


def keep_attempt(attempt: Path, log_path: Path, started: float, keep: int) -> None:
    """Append one attempt's log (``attempt``, then removed) to ``log_path`` under a header line with its start time,
    so that a later attempt of the same stage (the BABILong generation, retried by each run's evaluation) leaves an
    earlier one's output, which a failure line names, in place; the log keeps its last ``keep`` attempts."""
    _append(attempt, log_path, f"{ATTEMPT_HEADER}started {_stamp(started)} ---", keep)


def fold_left_attempt(attempt: Path, log_path: Path, keep: int) -> None:
    """An ``attempt`` log a stopped study left (SIGKILL: :func:`keep_attempt` never ran) appended to ``log_path``
    under a line saying it ended without a word, before the next attempt writes ``attempt`` again."""
    if attempt.is_file():
        _append(attempt, log_path, f"{ATTEMPT_HEADER}last written {_stamp(attempt.stat().st_mtime)} ended without a "
                                   "word (the study was stopped while it ran) ---", keep)


def _append(attempt: Path, log_path: Path, header: str, keep: int) -> None:
    text = attempt.read_text(errors="replace") if attempt.is_file() else ""
    with open(log_path, "a") as log:
        log.write(f"{header}\n{text}")
        log.write("" if not text or text.endswith("\n") else "\n")
    attempt.unlink(missing_ok=True)
    trim_attempts(log_path, keep)


def trim_attempts(log_path: Path, keep: int) -> None:
    """``log_path`` cut to its last ``keep`` sections (each from an :data:`ATTEMPT_HEADER` line; text before the
    first one, an older study's, counts as one), rewritten whole; a log within that is left as it is."""
    lines = log_path.read_text(errors="replace").splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(ATTEMPT_HEADER)]
    starts = ([0] if lines and starts[:1] != [0] else []) + starts
    if len(starts) > keep:
        atomic_write_text(log_path, "".join(lines[starts[-keep]:]))


def error_line(tail: str) -> str:
    """The most telling line of a failed log: the last exception line, else the last line; a log holding only
    :func:`run_command`'s ``$ argv`` header (a stage killed before it wrote a line) says so instead of the header."""
    lines = tail.splitlines()
    for line in reversed(lines):
        if re.match(r"^\s*[\w.]*(Error|Exception|Interrupt)\b.*", line) or re.match(r"^[\w.-]+: error: ", line):
            return line.strip()
    if len(lines) == 1 and lines[0].startswith("$ "):  # the header is the log's first line: nothing after it
        return "no output before it ended"
    return lines[-1].strip() if lines else ""


def steps_in(train_dir: Path) -> List[int]:
    """Completed recipe checkpoints ``step_<k>`` under ``train_dir`` (the recipe renames them into place whole)."""
    if not train_dir.is_dir():
        return []
    return sorted(int(m.group(1)) for p in train_dir.iterdir() if (m := STEP_PATTERN.match(p.name)) and p.is_dir())


def tune_command() -> str:
    """torchtune's ``tune`` of this interpreter's environment (a venv run as ``.venv/bin/python -m ...`` without
    being activated has it next to the interpreter, not on PATH); plain ``tune`` otherwise."""
    here = Path(sys.executable).with_name("tune")
    return str(here) if here.is_file() else "tune"


def tune_problem() -> Optional[str]:
    """Why :func:`tune_command` cannot be run here (None when it can): every fine-tune would fail at its start, after
    the base's evaluation has spent its minutes, so the study refuses first. The GPU route installs torchtune with
    ``pip install --target /tmp/site``, whose ``tune`` lands in /tmp/site/bin."""
    tune = tune_command()
    if shutil.which(tune):
        return None
    return (f"torchtune's command line {tune!r} is not next to this interpreter ({sys.executable}) nor on PATH: every "
            "fine-tune would fail to start; with torchtune installed by `pip install --target DIR`, put DIR/bin on "
            "PATH (the GPU route: export PATH=/tmp/site/bin:$PATH)")


def run_command(argv: Sequence[str], log_path: Path, cwd: Path, env: Dict[str, str], timeout: Optional[float]) -> int:
    """Run ``argv`` with stdout+stderr to ``log_path``; returns the exit code (124 on timeout).
    :class:`StudyInterrupted` when the subprocess was stopped by SIGINT / SIGTERM, or one reached this thread (the
    subprocess, which got it too, from the process group or forwarded by :mod:`~torchtune_longshort.study.stop`, is
    waited for: the recipe finishes its step and saves), or the study is being stopped (nothing is started)."""
    name = Path(str(argv[0])).name
    if len(argv) > 2 and str(argv[1]) == "-m":  # 'python' alone named neither lm-eval nor the BABILong generator
        name = f"{name} -m {argv[2]}"
    if received():
        raise StudyInterrupted(f"{name} not started: the study got {signal.Signals(received()).name}", received(),
                               name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(map(str, argv)) + "\n")
        log.flush()
        proc = subprocess.Popen(list(map(str, argv)), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=ends_with_study())
        with running(proc):
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                log.write(f"\nTimeoutError: killed after {timeout} s\n")
                return 124
            except KeyboardInterrupt as e:
                rc = _wait_saving(proc)
                by = e.signum if isinstance(e, StudySignal) else signal.SIGINT
                raise StudyInterrupted(stopped_words(name, by, rc), by, name) from None
    if rc in _STOPPED:  # the stage alone was signalled (a scheduler that signals the fine-tune only)
        raise StudyInterrupted(stopped_words(name, _STOPPED[rc], rc), _STOPPED[rc], name)
    if rc and received():  # the study's stop reached it where it could not stop as it does (tune importing torch:
        # a KeyboardInterrupt traceback, exit 1), waited for in a thread the stop was not raised in
        raise StudyInterrupted(stopped_words(name, received(), rc), received(), name)
    return rc


def run_stage(executor: Callable[..., int], stage: str, argv: Sequence[str], log_path: Path, cwd: Path,
              env: Dict[str, str], timeout: Optional[float]) -> int:
    """``executor(argv, ...)``'s exit code for ``stage``; a stop of it told by the stage's program's name
    (:data:`PROGRAMS`), the name :func:`exit_words` tells its failure by ('recipe stopped by SIGINT (exit 130)' as
    'recipe killed by SIGKILL', not 'tune stopped by ...'). A full disk met writing the stage's log (its flush says
    only "No space left on device") is raised naming ``log_path`` (:func:`~torchtune_longshort.disk_space.naming`)."""
    try:
        with naming(log_path):
            return executor(argv, log_path, cwd, env, timeout)
    except StudyInterrupted as e:
        raise e.named(PROGRAMS[stage]) from None


def _wait_saving(proc: subprocess.Popen) -> int:
    """The exit code of a stage told to stop, waited for while it saves (a second Ctrl-C here keeps waiting: the
    stage got it too)."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def run_eval(executor: Callable[..., int], argv: Sequence[str], log_path: Path, cwd: Path, env: Dict[str, str],
             timeout: Optional[float], eval_dir: Path, tasks: Sequence[str]) -> Dict[str, Any]:
    """One lm-eval command through ``executor`` (:func:`run_command`, or a test's stand-in), then its results by
    task: a :class:`StageError` ("eval", with the log's tail) when it exits non-zero, writes no results or lacks
    one of ``tasks``."""
    rc = run_stage(executor, "eval", argv, log_path, cwd, env, timeout)
    if rc != 0:
        tail = log_tail(log_path)
        raise StageError("eval", f"{exit_words('eval', rc)}: {error_line(tail)}", tail)
    try:
        results = load_results(eval_dir)
    except FileNotFoundError as e:
        raise StageError("eval", str(e), log_tail(log_path)) from e
    missing = [t for t in tasks if t not in results]
    if missing:
        raise StageError("eval", f"lm-eval results lack tasks {missing}", log_tail(log_path))
    return results


def train_summary(train_dir: Path, last: int = 10) -> Dict[str, Any]:
    """Final-step and last-``last``-steps mean of the recipe's ``metrics.jsonl`` (ce, misalignment, loss), the
    training CE per step and, when the recipe validated, the held-out CE per validation step."""
    path = train_dir / "metrics.jsonl"
    if not path.is_file():
        return {}
    all_rows = [row for _, row in metric_lines(path)]  # a last line torn by a kill dropped, as a resume drops it
    # one row per step, the last written (a step logged again after a resume or a crash supersedes its first row:
    # the curves went back in x and the last-steps mean counted the lost step), in step order
    rows = _last_per_step(r for r in all_rows if "ce" in r)
    if not rows:
        return {}
    tail = rows[-last:]
    out = {"steps": rows[-1].get("step"),
           "final": {k: rows[-1][k] for k in ("loss", "ce", "misalignment") if k in rows[-1]}}
    out[f"mean_last_{len(tail)}"] = {k: sum(r[k] for r in tail) / len(tail) for k in ("loss", "ce", "misalignment")
                                     if all(k in r for r in tail)}
    val = [(r["step"], r["val_ce"]) for r in _last_per_step(r for r in all_rows if "val_ce" in r)]
    if val:
        out["val_ce"] = val  # (step, held-out CE) pairs: the convergence curve
    out["ce_curve"] = [(r["step"], r["ce"]) for r in rows]
    tps = [r["tokens_per_second"] for r in rows if "tokens_per_second" in r]
    if tps:
        out["tokens_per_second_median"] = sorted(tps)[len(tps) // 2]
    return out


def _last_per_step(rows) -> List[Dict[str, Any]]:
    """``rows`` (metrics.jsonl rows, in file order) with one per ``step``, the last one written, sorted by step."""
    by_step = {r["step"]: r for r in rows if isinstance(r.get("step"), int)}  # a later row replaces an earlier one
    return [by_step[k] for k in sorted(by_step)]


def output_folder(configured, override=None, repo_root=None) -> Tuple[Path, Path]:
    """``(root, out)`` of a study runner: ``repo_root`` (default: the current directory) resolved, and the output
    folder (``override`` or the config's), relative ones under that root."""
    root = Path(repo_root or Path.cwd()).expanduser().resolve()
    out = Path(override or configured).expanduser()  # "--out=~/x": no shell expands a tilde after "="
    return root, (out if out.is_absolute() else root / out)


def hold_output_folder(out: Path, holder: str) -> OutputDirLock:
    """The lock of a study's (or Table 1's) output folder, held, as the recipe's on its output_dir: another command
    there is refused (``OutputDirInUse``, naming it), a lock left by a killed one is taken over; ``release(discard=
    True)`` takes back a folder this call made that holds only the lock."""
    lock = OutputDirLock(out, field="--out (or the config's output_dir)", holder=holder)
    lock.made_root = missing_root(out)
    lock.acquire()
    lock.made_folder = lock.made_root is not None
    return lock
