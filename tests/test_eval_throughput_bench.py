"""benchmarks/eval_throughput.py: bad input refused in one line before any work, and a worker that fails or dies
ends the run with its error instead of leaving the parent waiting on the queue for ever."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import eval_throughput  # noqa: E402


def test_a_device_no_worker_can_use_is_refused_not_waited_on_for_ever(tmp_path):
    """``--device cdua`` (as ``--lengths -5``, ``--num_seqs 0`` or ``--dtype foo``) failed in the spawned worker
    and the parent's ``q.get()`` waited for ever: a 2-minute timeout ended it, with nothing said."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, str(REPO / "benchmarks/eval_throughput.py"), "--lengths", "64",
                        "--gen_prompts", "0", "--device", "cdua"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=90)
    assert p.returncode == 2
    assert "--device 'cdua': not a torch device" in p.stderr.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran


@pytest.mark.parametrize("args, says", [
    (["--lengths", "-5"], "--lengths -5: each at least 1 token"),
    (["--lengths", "1k"], "--lengths '1k': comma-separated token counts"),
    (["--num_seqs", "0"], "--num_seqs 0: at least 1"),
    (["--rounds", "0"], "--rounds 0: at least 1"),
    (["--gen_prompts", "-1"], "--gen_prompts -1: 0 (no generation workload) or more"),
    (["--dtype", "foo"], "invalid choice: 'foo'"),
    (["--checkpoint_dir", "no_such_dir"], "--checkpoint_dir no_such_dir: no such folder"),
    (["--out", "."], "--out .: a folder; pass the JSON file to write"),
], ids=["negative_length", "length_not_int", "num_seqs", "rounds", "gen_prompts", "dtype", "checkpoint", "out_dir"])
def test_bad_input_is_refused_in_one_line(args, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        eval_throughput.main(["--lengths", "64", *args])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_worker_that_dies_without_a_result_is_reported():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=os._exit, args=(3,))
    p.start()
    assert eval_throughput._receive(q, p) == {"error": "the process exited with code 3 and no result"}
    p.join()

