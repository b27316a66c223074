"""Graphs and dynamo recompiles of the recipe's ``compile: True`` over a few steps, ``e`` drawn anew each step.

The recipe compiles each decoder layer (``torchtune_longshort.training.compile_setup``); the layers share one
graph. A new graph after step 1 means a guard failed: a Python value that changes per step (``e``, a position
bound, CLEX's ``t``) was baked into the graph. Per case: the graphs compiled (dynamo's ``unique_graphs``), the
``Recompiling function`` lines of ``TORCH_LOGS=recompiles`` with their reasons, and at which layer call each new
graph came (the recipe's own record). Dynamo's guards, not the backend, decide a recompile: ``aot_eager`` (the
default here, minutes less on a CPU) sees the same ones as inductor (``--backend inductor``).

    python benchmarks/recompiles.py [--steps 6] [--backend aot_eager] [--cases default,yarn,clex,yarn+pose]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch._dynamo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_syncs import tiny_checkpoint, train_cfg  # noqa: E402


class _Recompiles(logging.Handler):
    def __init__(self):
        super().__init__()
        self.reasons = []

    def emit(self, record):
        message = record.getMessage()
        if "Recompiling function" in message:
            self.reasons.append(" ".join(message.split()))


def run_case(ckpt: Path, tok: Path, out: Path, rope: str, steps: int) -> dict:
    """``{"graphs", "recompiles" (reasons), "events" (layer, call, new graphs), "e" (per step)}``."""
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.compile_setup import graphs_compiled

    torch._dynamo.reset()
    cfg = train_cfg(ckpt, tok, out, 0.1, False, rope, compile=True, max_steps=steps,
                    enable_activation_checkpointing=rope.startswith("clex"))
    handler = _Recompiles()
    log = logging.getLogger("torch._dynamo")
    log.addHandler(handler)
    torch._logging.set_logs(recompiles=True)
    before = graphs_compiled()
    try:
        recipe = LongShortFinetuneRecipe(cfg)
        recipe.setup()
        seen_e = []
        next_batch = recipe._batcher.next_batch

        def recording():
            batch = next_batch()
            seen_e.append(batch["e"])
            return batch

        recipe._batcher.next_batch = recording
        recipe.train()
        recipe.cleanup()
    finally:
        torch._logging.set_logs()
        log.removeHandler(handler)
    events = [(layer, call, n) for layer, call, n, _ in (recipe.compiled.events if recipe.compiled else [])]
    return {"graphs": graphs_compiled() - before, "recompiles": handler.reasons, "events": events, "e": seen_e,
            "failed": recipe.compiled.failed if recipe.compiled else "not compiled"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--backend", default="aot_eager", help="TORCH_COMPILE_BACKEND for the layers")
    p.add_argument("--cases", default="default,yarn,clex,yarn+pose")
    args = p.parse_args(argv)
    os.environ["TORCH_COMPILE_BACKEND"] = args.backend
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rows = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        ckpt, tok = tiny_checkpoint(Path(tmp))
        for i, rope in enumerate(args.cases.split(",")):
            rows.append((rope, run_case(ckpt, tok, Path(tmp) / f"out{i}", rope, args.steps)))
    print(f"| case ({args.backend}, {args.steps} steps) | e per step | graphs | recompiles "
          "| new graphs at layer calls |")
    print("|---|---|---:|---:|---|")
    for rope, r in rows:
        at = ", ".join(f"{layer} call {call}" for layer, call, _ in r["events"]) or "-"
        print(f"| {rope} | {r['e']} | {r['graphs']} | {len(r['recompiles'])} | {at} |")
    for rope, r in rows:
        if r["failed"]:
            print(f"\n{rope}: compiling failed: {r['failed']}")
        for reason in r["recompiles"]:
            print(f"\n{rope}: {reason[:600]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
