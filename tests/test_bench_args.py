"""The benchmark scripts refuse a size no run could use in one line, before any work (benchmarks/bench_args.py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (script, bad arguments, what the one line says): each was a traceback from the first tensor built with it
# (loss_overhead --steps 0: IndexError; --seq-len -5: "upper bound and lower bound inconsistent"; fused_loss_memory
# --seq-len -1: "negative dimension"; rope_clex_cost --steps 0: "no median for empty data"; longrope_parity
# --original 0: ZeroDivisionError; s2attn_memory --group-ratio 0: a child's CalledProcessError), or a table of a run
# that did nothing (kill_resume --kills -1); rope_rotate_cost --dtypes fp8 a KeyError, host_syncs --cases foo
# "max() arg is an empty sequence" after building its checkpoint, eval_row_memory --points foo a ValueError after
# loading the model.
CASES = [
    ("loss_overhead", ["--steps", "0"], "argument --steps: 0: at least 1"),
    ("loss_overhead", ["--seq-len", "-5"], "argument --seq-len: -5: at least 1"),
    ("loss_overhead", ["--e", "x"], "argument --e: 'x': an integer of at least 1"),
    ("fused_loss_memory", ["--seq-len", "-1"], "argument --seq-len: -1: at least 1"),
    ("fused_loss_memory", ["--chunks", "0"], "argument --chunks: 0: at least 1"),
    ("rope_clex_cost", ["--steps", "0"], "argument --steps: 0: at least 1"),
    ("rope_clex_cost", ["--t-max", "0"], "argument --t-max: 0: at least 1"),
    ("kill_resume", ["--kills", "-1"], "argument --kills: -1: at least 1"),
    ("tiled_mlp_cost", ["--L", "-1"], "argument --L: -1: at least 1"),
    ("longrope_parity", ["--original", "0"], "argument --original: 0: at least 1"),
    ("s2attn_memory", ["--seq", "-1"], "argument --seq: -1: at least 1"),
    ("s2attn_memory", ["--seq", "100", "--group-ratio", "0"], "group size 0 must be even, at least 2"),
    ("rope_rotate_cost", ["--lengths", "-1"], "argument --lengths: '-1': comma-separated integers of at least 1"),
    ("rope_rotate_cost", ["--dtypes", "fp8"], "argument --dtypes: 'fp8': comma-separated names from"),
    ("host_syncs", ["--cases", "foo"], "argument --cases: 'foo': comma-separated names from train, torchrun, eval"),
    ("eval_row_memory", ["--checkpoint_dir", ".", "--points", "foo"], "argument --points: 'foo': LENGTHxROWS pairs"),
    ("eval_row_memory", ["--checkpoint_dir", "no_such_dir"], "--checkpoint_dir no_such_dir: no such folder"),
]


@pytest.mark.parametrize("script, args, says", CASES, ids=[f"{s}_{a[-2].strip('-')}_{a[-1]}" for s, a, _ in CASES])
def test_a_size_no_run_could_use_is_refused_in_one_line(script, args, says, capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    module = importlib.import_module(script)
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("script", ["recipe_throughput", "kill_resume"])
def test_out_naming_a_users_folder_is_refused_before_anything_is_written(script, tmp_path, capsys):
    """Their runs write folders of fixed names with ``overwrite_output_dir=True`` (and recipe_throughput a
    results.json) into ``--out``: a user's folder was written into and its same-named entries replaced. As
    compile_throughput already did, a folder that is not empty (or a file) is refused."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.json").write_text("a user's file")
    sys.path.insert(0, str(REPO / "benchmarks"))
    module = importlib.import_module(script)
    for out in (mine, mine / "results.json"):
        with pytest.raises(SystemExit) as exit_:
            module.main(["--out", str(out)])
        assert exit_.value.code == 2
        assert f"--out '{out}' exists and is not an empty folder" in capsys.readouterr().err.strip().splitlines()[-1]
    assert sorted(p.name for p in mine.iterdir()) == ["results.json"]
    assert (mine / "results.json").read_text() == "a user's file"
