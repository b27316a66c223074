"""A Python snippet run in a fresh interpreter with the hub's variables of this test run taken away (the suite sets
the offline ones): the hub as a user without it meets it."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_without_hub(script: str, tmp_path: Path, timeout: int, **hub_env: str) -> str:
    """``script`` run with ``hub_env`` (HF_ENDPOINT=..., or HF_HUB_OFFLINE=1) and an empty HF_HOME; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env.update(hub_env, HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(ROOT))
    env.pop("HF_DATASETS_CACHE", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
