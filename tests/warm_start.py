"""Start and stop the tests' zygote (``tests/warm/zygote.py``), and the environment of the processes it serves."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

WARM_DIR = Path(__file__).resolve().parent / "warm"


def start_zygote(base: Path):
    """Start one zygote with this process's environment; point the processes this one starts at it (through
    ``os.environ``). Returns the function that stops it. Nothing is started with ``LONGSHORT_TEST_FRESH`` set."""
    if os.environ.get("LONGSHORT_TEST_FRESH"):
        return lambda: None
    sock = Path(tempfile.mkdtemp(prefix="lsz")) / "s"  # a Unix socket's path must be short (108 bytes)
    log = Path(base) / f"zygote-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "LONGSHORT_TEST_ZYGOTE"}
    out = open(Path(base) / f"zygote-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.out", "w")
    proc = subprocess.Popen([sys.executable, str(WARM_DIR / "zygote.py"), str(sock), "--log", str(log)],
                            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    os.environ["LONGSHORT_TEST_ZYGOTE"] = str(sock)
    os.environ["PYTHONPATH"] = with_warm_start(os.environ.get("PYTHONPATH"))

    def stop():
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()
        sock.unlink(missing_ok=True)
        sock.parent.rmdir()

    return stop


def with_warm_start(pythonpath: str | None = None) -> str:
    """``pythonpath`` with the warm-start folder in front (only its ``sitecustomize.py`` is there), for a test
    that sets PYTHONPATH for its subprocess."""
    parts = [p for p in (pythonpath or "").split(os.pathsep) if p and p != str(WARM_DIR)]
    return os.pathsep.join([str(WARM_DIR), *parts])
