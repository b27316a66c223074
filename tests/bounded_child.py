"""A snippet run in a child Python with the checkout first on its path and a time limit: for calls that once went
round forever (a link to nothing at a lock's or a temporary file's name), so that a return of the old loop fails the
test instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]


def run_bounded(code: str, *argv, seconds: float = 10, spun: str) -> subprocess.CompletedProcess:
    """Run ``code`` (``sys.argv[1:]`` = ``argv``) in a child; ``pytest.fail`` with ``spun`` if it outlasts
    ``seconds``."""
    try:
        return subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True, text=True,
                              timeout=seconds, env={**os.environ, "PYTHONPATH": str(CHECKOUT)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{spun} for {seconds:g} s")
