"""Cost of CLEX's neural ODE per training step, as a ratio to plain RoPE (and to PI) on the same model.

One training step = forward + backward of a small torchtune Llama-2 on one sequence. CLEX draws t in
[1, t_max] each step and solves its ODE from 1 to t with RK4 (step ``time_dt``), with gradients; the table
also shows the ODE solve alone and an eval-mode forward (where CLEX caches frequencies per integer t).
All variants are timed in this process, interleaved, median of ``--steps`` steps.

Run:  python benchmarks/rope_clex_cost.py [--steps 8] [--dim 256] [--layers 4] [--seq 512] [--t-max 8] [--out r.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import positive_int  # noqa: E402  (benchmarks/: not a package)


def build(method, a):
    from torchtune.models.llama2 import llama2

    from torchtune_longshort.models import apply_rope_scaling

    torch.manual_seed(0)
    model = llama2(vocab_size=1000, num_layers=a.layers, num_heads=a.dim // 64, num_kv_heads=a.dim // 64,
                   embed_dim=a.dim, max_seq_len=a.seq)
    if method == "linear":
        apply_rope_scaling(model, "linear", a.seq * a.t_max)
    elif method.startswith("clex"):
        apply_rope_scaling(model, "clex", a.seq * a.t_max, t_max=a.t_max, time_dt=a.time_dt)
        with torch.no_grad():
            model.layers[0].attn.pos_embeddings.ode_down_proj.normal_(std=0.02)
    return model


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=positive_int, default=8)
    p.add_argument("--dim", type=positive_int, default=256)
    p.add_argument("--layers", type=positive_int, default=4)
    p.add_argument("--seq", type=positive_int, default=512)
    p.add_argument("--t-max", type=positive_int, default=8)
    p.add_argument("--time-dt", type=float, default=0.01)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from tqdm import tqdm

    models = {m: build(m, a) for m in ("plain", "linear", "clex")}
    tokens = torch.randint(0, 1000, (1, a.seq), generator=torch.Generator().manual_seed(0))
    times = {k: [] for k in ("plain", "linear", "clex", "clex_ode_only", "plain_eval", "clex_eval")}
    clex_rope = models["clex"].layers[0].attn.pos_embeddings
    ts = []
    torch.manual_seed(1)
    for step in tqdm(range(a.steps + 1), desc="rope_clex_cost"):
        for name in ("plain", "linear", "clex"):
            m = models[name].train()
            t0 = time.perf_counter()
            m(tokens).float().logsumexp(-1).mean().backward()
            dt = time.perf_counter() - t0
            m.zero_grad(set_to_none=True)
            if step:  # step 0 is warm-up
                times[name].append(dt)
        t = int(torch.randint(1, a.t_max + 1, (1,)))
        t0 = time.perf_counter()
        inv_freq = clex_rope.inv_freq_at(t)
        if inv_freq.requires_grad:  # t = 1: the base frequencies, no ODE to solve and nothing to differentiate
            inv_freq.sum().backward()
        if step:
            times["clex_ode_only"].append(time.perf_counter() - t0)
            ts.append(t)
        clex_rope.zero_grad(set_to_none=True)
        with torch.no_grad():
            for name in ("plain", "clex"):
                m = models[name].eval()
                t0 = time.perf_counter()
                m(tokens)
                if step:
                    times[f"{name}_eval"].append(time.perf_counter() - t0)

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"CLEX cost, llama2 dim {a.dim}, {a.layers} layers, head_dim 64, seq {a.seq}, t_max {a.t_max}, "
          f"time_dt {a.time_dt}, CPU float32, median of {a.steps} steps")
    print(f"{'variant':34} {'ms':>9} {'ratio vs plain':>15}")
    rows = [
        ("train step, plain RoPE", "plain", "plain"),
        ("train step, PI (linear)", "linear", "plain"),
        ("train step, CLEX (t drawn per step)", "clex", "plain"),
        ("CLEX ODE solve + backward only", "clex_ode_only", "plain"),
        ("eval forward, plain RoPE", "plain_eval", "plain_eval"),
        ("eval forward, CLEX (cached t)", "clex_eval", "plain_eval"),
    ]
    for label, key, base in rows:
        print(f"{label:34} {med[key] * 1e3:>9.1f} {med[key] / med[base]:>15.2f}")
    print(f"(ODE-only rows use t drawn uniformly in [1, {a.t_max}]: {ts})")
    if a.out:
        with open(a.out, "w") as fh:
            from torchtune_longshort.provenance import provenance

            json.dump({"args": vars(a), "median_seconds": med, "ts": ts, "provenance": provenance(device="cpu")}, fh,
                      indent=2)


if __name__ == "__main__":
    main()
