"""Where the test suite's time goes: every Python process it starts, the CPU time each used, and how much of it
was spent importing torchtune (which imports torchao, and through it torch._dynamo and torch._inductor).

    python benchmarks/suite_cost.py [--venv .venv] [--log FILE] [-- PYTEST_ARGS ...]   # run the suite, logged
    python benchmarks/suite_cost.py --summarize FILE                                  # the table of a log

Logging: a ``sitecustomize.py`` written into the venv's ``site-packages`` for the run, removed after it (refused if
the venv already has one that is not this script's), appends one JSON line per process at exit: argv, wall time,
its own CPU time (``os.times``: user + system, children not included), whether torchtune and lm-eval's evaluator
were imported. Processes that end without running ``atexit`` handlers (SIGKILL, ``os._exit``) and processes of
other venvs (the wheel test's) are not logged. Under the tests' warm start (``tests/warm/``) a command forked from a
zygote is logged too (the zygote loaded this logger; the job runs its exit handlers): its CPU is its own, its wall
counts from the zygote's start. The import cost is measured here: the median of ``--repeats`` fresh
interpreters timing ``import torchtune`` after ``import torch``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

MARK = "# benchmarks/suite_cost.py process logger"
LOGGER = MARK + '''
import atexit, json, os, sys, time
_t0 = time.time()
def _suite_cost_log():
    try:
        r = os.times()
        with open(%(log)r, "a") as f:
            f.write(json.dumps({"argv": sys.argv[:6], "wall": time.time() - _t0, "cpu": r.user + r.system,
                                "torchtune": "torchtune" in sys.modules,
                                "lm_eval": "lm_eval.evaluator" in sys.modules}) + "\\n")
    except Exception:
        pass
atexit.register(_suite_cost_log)
'''
IMPORT_TIMER = ("import time, torch; t = time.process_time(); import torchtune; "
                "print(time.process_time() - t)")


def site_packages(venv: Path) -> Path:
    python = venv / "bin" / "python"
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def import_cost(python: str, repeats: int) -> float:
    """CPU seconds ``import torchtune`` takes after ``import torch`` in a fresh interpreter (median)."""
    times = [float(subprocess.run([python, "-c", IMPORT_TIMER], capture_output=True, text=True,
                                  check=True).stdout.split()[-1]) for _ in range(repeats)]
    return statistics.median(times)


def run_logged(venv: Path, log: Path, pytest_args: list) -> int:
    target = site_packages(venv) / "sitecustomize.py"
    if target.exists() and MARK not in target.read_text():
        sys.exit(f"suite_cost: {target} exists and is not this script's logger: remove it or use another --venv")
    log.unlink(missing_ok=True)
    target.write_text(LOGGER % {"log": str(log.resolve())})
    try:
        return subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", *pytest_args]).returncode
    finally:
        target.unlink(missing_ok=True)


def _name(argv: list) -> str:
    return " ".join(Path(a).name if "/" in a else a for a in argv[:3])[:70]


def summarize(log: Path, t_import: float, top: int = 12) -> str:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    tt = [r for r in rows if r["torchtune"]]
    cpu = sum(r["cpu"] for r in rows)
    lines = [f"{len(rows)} processes logged, {cpu:.0f} CPU-s; `import torchtune` costs {t_import:.2f} CPU-s here",
             "", "| processes | count | CPU s | share |", "|---|---:|---:|---:|",
             f"| all logged | {len(rows)} | {cpu:.0f} | 100% |",
             f"| imported torchtune | {len(tt)} | {sum(r['cpu'] for r in tt):.0f} | "
             f"{sum(r['cpu'] for r in tt) / cpu:.0%} |",
             f"| ... of it importing torchtune (count x cost) | {len(tt)} | {len(tt) * t_import:.0f} | "
             f"{len(tt) * t_import / cpu:.0%} |",
             f"| imported lm-eval's evaluator | {sum(r['lm_eval'] for r in rows)} | "
             f"{sum(r['cpu'] for r in rows if r['lm_eval']):.0f} | |", "",
             "| command (first 3 argv) | processes | CPU s |", "|---|---:|---:|"]
    count, total = Counter(), Counter()
    for r in rows:
        count[_name(r["argv"])] += 1
        total[_name(r["argv"])] += r["cpu"]
    lines += [f"| `{k}` | {count[k]} | {v:.0f} |" for k, v in total.most_common(top)]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=Path(".venv"))
    ap.add_argument("--log", type=Path, default=Path("suite_procs.jsonl"))
    ap.add_argument("--summarize", type=Path, help="print the table of an earlier log, run nothing")
    ap.add_argument("--repeats", type=int, default=3, help="fresh interpreters timing the torchtune import")
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = ap.parse_args(argv)
    rc = 0
    if args.summarize is None:
        rc = run_logged(args.venv, args.log, args.pytest_args)
    python = str(args.venv / "bin" / "python") if (args.venv / "bin" / "python").exists() else sys.executable
    print(summarize(args.summarize or args.log, import_cost(python, args.repeats)))
    return rc


if __name__ == "__main__":
    sys.exit(main())
