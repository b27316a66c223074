"""Start and stop the tests' zygotes (``tests/warm/zygote.py``), and the environment of the processes they serve."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Mapping, Tuple

WARM_DIR = Path(__file__).resolve().parent / "warm"


def start_zygote(log_dir: Path, name: str, env: Mapping[str, str], python: str = sys.executable
                 ) -> Tuple[Dict[str, str], Callable[[], None]]:
    """Start a zygote of ``python`` with ``env`` (its import-time variables are the ones it serves). Returns the
    environment of the processes it should serve (``env`` with the socket and the warm-start folder on PYTHONPATH)
    and the function that stops it. With ``LONGSHORT_TEST_FRESH`` set nothing starts and ``env`` comes back."""
    env = {k: v for k, v in env.items() if k != "LONGSHORT_TEST_ZYGOTE"}
    if os.environ.get("LONGSHORT_TEST_FRESH"):
        return env, lambda: None
    sock = Path(tempfile.mkdtemp(prefix="lsz")) / "s"  # a Unix socket's path must be short (108 bytes)
    out = open(Path(log_dir) / f"zygote-{name}.out", "w")
    proc = subprocess.Popen([python, str(WARM_DIR / "zygote.py"), str(sock), "--log",
                             str(Path(log_dir) / f"zygote-{name}.jsonl")],
                            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not sock.exists() and proc.poll() is None and time.time() < deadline:  # bound first thing; then commands
        time.sleep(0.05)  # wait in its backlog while it imports

    def stop():
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()
        sock.unlink(missing_ok=True)
        sock.parent.rmdir()

    return {**env, "LONGSHORT_TEST_ZYGOTE": str(sock), "PYTHONPATH": with_warm_start(env.get("PYTHONPATH"))}, stop


def _zygote_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_zygote", WARM_DIR / "zygote.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_bytecode(folder: Path) -> Dict[str, str]:
    """This package's bytecode, in its own ``__pycache__`` folders as Python writes it by default, once a test run.
    Under ``PYTHONDONTWRITEBYTECODE`` (this machine's environment sets it) no process writes a ``.pyc``: on a clean
    checkout every command a test started compiled the package's ~300 modules from source again, ~0.5 s a process
    and ~300 processes a run. (A ``PYTHONPYCACHEPREFIX`` folder would keep the checkout as it was, but every
    process then looks there for torch's and transformers' bytecode too and compiles them instead: the suite's
    subprocess-heavy files took twice as long.) Nothing when the environment writes bytecode itself."""
    import compileall

    if sys.flags.dont_write_bytecode:
        root = WARM_DIR.parents[1]
        for name in ("torchtune_longshort", "recipes"):
            compileall.compile_dir(root / name, quiet=1, workers=1)
    return {}


def compute_env_report(folder: Path) -> Dict[str, str]:
    """torch's collect_env report, computed here into ``folder`` (once a test run: ``_built_once``; before the
    zygotes start, so its ``pip`` runs fresh); the environment that tells a zygote where it is (``ENV_REPORT`` in
    tests/warm/zygote.py says why)."""
    import json

    from torch.utils.collect_env import get_pretty_env_info

    path = Path(folder) / "env_report.json"
    path.write_text(json.dumps({"python": sys.executable, "text": get_pretty_env_info()}))
    return {_zygote_module().ENV_REPORT: str(path)}


def serve_env_report(env: Mapping[str, str]) -> None:
    """This process's lm-eval calls take torch's collect_env report from the file ``env`` names."""
    zygote = _zygote_module()
    zygote.use_env_report(env[zygote.ENV_REPORT])


def with_warm_start(pythonpath: str | None = None) -> str:
    """``pythonpath`` with the warm-start folder in front (only its ``sitecustomize.py`` is there), for a test
    that sets PYTHONPATH for its subprocess."""
    parts = [p for p in (pythonpath or "").split(os.pathsep) if p and p != str(WARM_DIR)]
    return os.pathsep.join([str(WARM_DIR), *parts])
