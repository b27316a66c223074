"""S2-Attn vs full causal attention: training-time memory (and time) of one attention forward + backward.

Two measures, both taken for S2-Attn and for the full-attention baseline in the same run:
- saved-for-backward bytes: the activations autograd keeps between forward and backward (torch's
  ``saved_tensors_hooks``, distinct storages counted once);
- peak RSS increase of a fresh child process over one forward + backward (``resource.getrusage``): an
  allocator-level figure on CPU, where torch exposes no allocator statistics.
Both SDPA back-ends are shown: ``math`` materialises the [s, s] score matrix (what eager attention does, and what
LongLoRA's memory claim is about); ``default`` lets PyTorch pick its fused CPU kernel, which never materialises
it, so S2-Attn's memory advantage shrinks there (its FLOP saving remains).

Run:  python benchmarks/s2attn_memory.py [--seq 1024 2048 4096] [--heads 8] [--head-dim 64] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import positive_int  # noqa: E402  (benchmarks/: not a package)


def _run_once(kind: str, backend: str, seq: int, heads: int, head_dim: int, group_ratio: float):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from torchtune_longshort.models.s2_attn import s2_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq, head_dim, requires_grad=True) for _ in range(3))
    group = int(seq * group_ratio)

    def attn():
        if kind == "full":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s2_attention(q, k, v, group)

    saved = {}

    def pack(t):
        saved[(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())] = True
        return t

    import contextlib

    ctx = sdpa_kernel([SDPBackend.MATH]) if backend == "math" else contextlib.nullcontext()
    with ctx:
        # Warm up kernels on a small problem: a same-size warm-up would set the RSS high-water mark itself.
        wq = torch.randn(1, heads, 64, head_dim, requires_grad=True)
        (F.scaled_dot_product_attention(wq, wq, wq, is_causal=True).sum()
         + s2_attention(wq, wq, wq, 16).sum()).backward()
        del wq
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = attn()
        out.sum().backward()
        dt = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    saved_bytes = sum(n for (_, n) in saved)
    return {"saved_bytes": saved_bytes, "peak_rss_kib": max(0, rss1 - rss0), "seconds": dt}


def measure(kind, backend, seq, heads, head_dim, group_ratio):
    """Run one configuration in a fresh interpreter (so the RSS high-water mark is its own)."""
    cmd = [sys.executable, __file__, "--child", kind, backend, str(seq), str(heads), str(head_dim), str(group_ratio)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, backend, seq, heads, head_dim, ratio = sys.argv[2:8]
        print(json.dumps(_run_once(kind, backend, int(seq), int(heads), int(head_dim), float(ratio))))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=positive_int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--heads", type=positive_int, default=8)
    p.add_argument("--head-dim", type=positive_int, default=64)
    p.add_argument("--group-ratio", type=float, default=0.25)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    a = p.parse_args(argv)
    for seq in a.seq:  # S2-Attn's groups: G = seq x ratio tokens, even (half shifted by G/2), dividing seq
        group = int(seq * a.group_ratio)
        if group < 2 or group % 2 or seq % group:
            p.error(f"--seq {seq} --group-ratio {a.group_ratio:g}: group size {group} must be even, at least 2 and "
                    f"divide the length (e.g. --seq 1024 --group-ratio 0.25)")

    from tqdm import tqdm

    rows = []
    jobs = [(b, s) for b in ("math", "default") for s in a.seq]
    for backend, seq in tqdm(jobs, desc="s2attn_memory"):
        full = measure("full", backend, seq, a.heads, a.head_dim, a.group_ratio)
        s2 = measure("s2", backend, seq, a.heads, a.head_dim, a.group_ratio)
        rows.append({"backend": backend, "seq_len": seq, "group_size": int(seq * a.group_ratio), "full": full,
                     "s2": s2})

    hdr = f"{'backend':8} {'seq':>6} {'G':>5} | {'saved MiB full':>14} {'s2':>8} {'ratio':>6} | " \
          f"{'peak RSS MiB full':>17} {'s2':>8} {'ratio':>6} | {'time ratio':>10}"
    print(f"S2-Attn vs full causal attention, 1 x {a.heads} heads x head_dim {a.head_dim}, fwd+bwd, float32 CPU")
    print(hdr)
    print("-" * len(hdr))
    mib = 1024 * 1024
    for r in rows:
        f, s = r["full"], r["s2"]
        rss_ratio = s["peak_rss_kib"] / f["peak_rss_kib"] if f["peak_rss_kib"] else float("nan")
        print(f"{r['backend']:8} {r['seq_len']:>6} {r['group_size']:>5} | {f['saved_bytes'] / mib:>14.1f} "
              f"{s['saved_bytes'] / mib:>8.1f} {s['saved_bytes'] / f['saved_bytes']:>6.2f} | "
              f"{f['peak_rss_kib'] / 1024:>17.1f} {s['peak_rss_kib'] / 1024:>8.1f} {rss_ratio:>6.2f} | "
              f"{s['seconds'] / f['seconds']:>10.2f}")
    print("ratio = S2-Attn / full attention (lower is better for S2-Attn)")
    if a.out:
        with open(a.out, "w") as fh:
            from torchtune_longshort.provenance import provenance

            json.dump({"rows": rows, "provenance": provenance(device="cpu")}, fh, indent=2)


if __name__ == "__main__":
    main()
