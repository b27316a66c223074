"""A real full disk for the tests: a command run in a user and mount namespace (``unshare``) where a folder is a small
tmpfs, so that writes there fail with the kernel's ``ENOSPC`` as on a full disk, with no root and nothing mounted
outside the command."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from warm_start import with_warm_start

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _unshare_works() -> str:
    try:
        p = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, text=True)
    except OSError as e:
        return str(e)
    return "" if p.returncode == 0 else p.stderr.strip()


WHY_NOT = _unshare_works()
needs_unshare = pytest.mark.skipif(bool(WHY_NOT), reason=f"no user namespaces here: {WHY_NOT}")


def on_small_disk(folder: Path, size: str, script: str, cwd: Path = REPO, timeout: int = 300,
                  **env) -> subprocess.CompletedProcess:
    """Run the shell ``script`` with ``folder`` a fresh tmpfs of ``size`` (``"12m"``); each Python command in it is
    forked from the tests' warm zygote, which enters the command's user and mount namespaces (``folder`` is the small
    tmpfs there too; before, each started a fresh interpreter: ~5 CPU-s of imports)."""
    folder.mkdir(parents=True, exist_ok=True)
    full = f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(folder))} && {script}"
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               **{k: str(v) for k, v in env.items()}}
    environ["PYTHONPATH"] = with_warm_start(environ.get("PYTHONPATH"))
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", full], cwd=cwd,
                          env=environ, capture_output=True, text=True, timeout=timeout)
