"""What the tiled MLP (``tiled_mlp_tokens``) costs in time and saves in memory, on this CPU: the recipe's step of
``memory_steps`` (both windows, every layer checkpointed, the fused loss at alpha 0.1, AdamW) untiled and tiled,
the same model and batch, step times interleaved in one process (order alternated by round, medians), and each
variant's peak live tensor bytes per phase from one profiled step.

    python benchmarks/tiled_mlp_cost.py                                  # the 8B-LoRA 1/8 replica, depth 2, L 1024
    python benchmarks/tiled_mlp_cost.py --shape 1b-full/8 --L 2048 --tiles 512 2048 --rounds 5

Expected cost: each tile's MLP forward runs once more in the backward pass (three MLP forwards a step instead of
two under the layer's checkpoint), about a sixth more of a layer's FLOPs where the MLP holds 2/3 of them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from bench_args import positive_int  # noqa: E402  (benchmarks/, on the path)
from memory_steps import REPLICAS, SHAPES, make_step, measure_step  # noqa: E402


def main(argv=None) -> int:
    shapes = {**{s.name: s for s in SHAPES.values()}, **{s.name: s for s in REPLICAS.values()}}
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="8b-lora/8", choices=sorted(shapes))
    ap.add_argument("--depth", type=positive_int, default=2)
    ap.add_argument("--L", type=positive_int, default=1024, help="tokens per window (both windows: 2 L rows)")
    ap.add_argument("--tiles", type=positive_int, nargs="+", default=[256, 1024], help="tiled_mlp_tokens values")
    ap.add_argument("--rounds", type=positive_int, default=5)
    args = ap.parse_args(argv)
    import torch

    variants = [None] + args.tiles
    steps = {t: make_step(shapes[args.shape], args.depth, args.L, tile=t) for t in variants}
    peaks = {t: measure_step(steps[t], args.shape, args.depth, "fp32", False) for t in variants}
    times = {t: [] for t in variants}
    for r in range(args.rounds):
        for t in (variants if r % 2 == 0 else variants[::-1]):
            t0 = time.perf_counter()
            steps[t].run()
            times[t].append(time.perf_counter() - t0)
    base_s, base_peak = statistics.median(times[None]), peaks[None]
    print(f"{args.shape}, depth {args.depth}, L {args.L} ({2 * args.L} rows), fp32, {torch.get_num_threads()} threads, "
          f"median of {args.rounds} interleaved steps\n")
    print("| MLP | step s | time / untiled | step peak MiB | deepest layer's backward MiB | peak / untiled |")
    print("|---|---|---|---|---|---|")
    for t in variants:
        s, p = statistics.median(times[t]), peaks[t]
        deepest = p["phases"][f"bwd_layer{args.depth - 1}"]
        print(f"| {f'tiles of {t}' if t else 'whole'} | {s:.2f} | {s / base_s:.3f} | {p['peak'] / 2**20:,.1f} | "
              f"{deepest / 2**20:,.1f} | {p['peak'] / base_peak['peak']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
