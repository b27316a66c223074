"""Step time and peak memory of the long-short loss: fused vs checkpointed vs naive full logits, alpha 0.1 vs 0.

Every variant runs forward + backward of both windows (A and B, ``L`` tokens each, one shared ``e``) through the same
model with activation checkpointing; only the loss path differs:

- ``fused a=0`` / ``fused a=0.1``: :class:`LongShortLoss` on final hidden states, its default fused path (per chunk:
  projection, float32 log-softmaxes, CE + divergence values and their gradients in the forward pass; nothing kept,
  nothing recomputed);
- ``ckpt a=0`` / ``ckpt a=0.1``: the same loss with ``fused=False``: the checkpointed path (chunk logits recomputed
  in backward), the fallback for output modules that are not a plain linear layer (e.g. LoRA on the output);
- ``naive a=0`` / ``naive a=0.1``: the model's full float32 logits, ``F.cross_entropy`` + SCE over full-vocabulary
  log-softmaxes.

Peak memory is the peak of live tensor bytes during one step above what was live before it (parameters excluded,
their gradients included): CUDA ``max_memory_allocated`` on a GPU, a tensor-level ``TorchDispatchMode`` tracker on a
CPU. Step time is the median over ``--steps`` repeats, the variants interleaved so that load on the machine hits
them alike. Ratios are against ``naive a=0`` of the same shape, and ``a=0.1 / a=0`` within each path.

    python benchmarks/loss_overhead.py [--threads 1]        # CPU shapes (minutes on 2 cores)
    python benchmarks/loss_overhead.py --device cuda        # Llama-3.2-1B shape at 8k tokens, bf16, and a 7B one
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import positive_int  # noqa: E402  (benchmarks/: not a package)

SHAPES = {
    # vocab / width ratios of Llama-2-7B (32000 / 4096 = 7.8) and Llama-3.2-1B (128256 / 2048 = 62.6)
    "cpu-7b-ratio": dict(vocab=8000, dim=1024, layers=2, heads=8, kv=8, hidden=2816, L=512),
    "cpu-1b-ratio": dict(vocab=32064, dim=512, layers=2, heads=8, kv=2, hidden=1536, L=512),
    "cuda-7b": dict(vocab=32000, dim=4096, layers=4, heads=32, kv=32, hidden=11008, L=4096),
    "cuda-1b": dict(vocab=128256, dim=2048, layers=16, heads=32, kv=8, hidden=8192, L=8192),
}
VARIANTS = [("fused", 0.0), ("fused", 0.1), ("ckpt", 0.0), ("ckpt", 0.1), ("naive", 0.0), ("naive", 0.1)]


def build(shape: str, device: str, e: int, spec: dict = None):
    """Model (activation checkpointing on), one dual-window batch, and a step function per variant.

    ``spec`` overrides the named shape (the GPU suite's smoke mode passes tiny dimensions)."""
    import torch
    import torch.nn.functional as F
    from torchtune.models.llama2 import llama2
    from torchtune.modules import TransformerSelfAttentionLayer
    from torchtune.training import set_activation_checkpointing

    from torchtune_longshort.loss import LongShortLoss, restore_model_output

    s = spec or SHAPES[shape]
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = llama2(vocab_size=s["vocab"], num_layers=s["layers"], num_heads=s["heads"], num_kv_heads=s["kv"],
                       embed_dim=s["dim"], intermediate_dim=s["hidden"], max_seq_len=s["L"])
    model = model.to(dtype)
    set_activation_checkpointing(model, auto_wrap_policy={TransformerSelfAttentionLayer})
    L = s["L"]
    tokens = torch.randint(0, s["vocab"], (1, L + e), device=device)
    a, b = tokens[:, :L], tokens[:, e : e + L]
    ign = torch.full((1, 1), -100, device=device)
    la, lb = torch.cat([a[:, 1:], ign], 1), torch.cat([b[:, 1:], ign], 1)

    def ours(alpha, fused=True):
        loss_fn = LongShortLoss(alpha=alpha, num_chunks=8, fused=fused)

        def step():
            loss_fn.set_model_output(model)
            try:
                return loss_fn(model(a), model(b), la, lb, e).loss
            finally:
                restore_model_output(model)
        return step

    def naive(alpha):
        def step():
            ga, gb = model(a), model(b)  # full [1, L, vocab] float32 logits (torchtune upcasts)
            ce = (F.cross_entropy(ga[0], la[0], ignore_index=-100)
                  + F.cross_entropy(gb[0], lb[0], ignore_index=-100)) / 2
            if alpha == 0:
                return ce
            lo = L // 2
            lpa = F.log_softmax(ga[:, lo + e : L].float(), -1)
            lpb = F.log_softmax(gb[:, lo : L - e].float(), -1)
            return ce + alpha * (-(lpb.exp() * lpa + lpa.exp() * lpb).sum(-1).mean())
        return step

    make = {"fused": ours, "ckpt": lambda al: ours(al, fused=False), "naive": naive}
    steps = {(p, al): make[p](al) for p, al in VARIANTS}
    return model, steps


def peak_bytes(model, step, device: str) -> int:
    """Peak bytes of live tensors during one forward+backward, over what was live before it."""
    import torch

    model.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    model.zero_grad(set_to_none=True)
    with LiveTensorBytes() as tracker:
        step().backward()
    return tracker.peak


class LiveTensorBytes:
    """Peak bytes of tensor storages created inside the context and still alive (CPU stand-in for CUDA's
    ``max_memory_allocated``). Every op output passes through a ``TorchDispatchMode``; each new storage is counted
    until its weak reference dies. Autograd's CPU backward runs on the calling thread, so it is seen too."""

    def __init__(self):
        self.live = 0
        self.peak = 0
        self._refs = {}

    def __enter__(self):
        import weakref

        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves
        import torch

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                        st = t.untyped_storage()
                        key = id(st)
                        if key in tracker._refs or st.nbytes() == 0:
                            continue
                        n = st.nbytes()

                        def _free(_ref, key=key, n=n):
                            tracker._refs.pop(key, None)
                            tracker.live -= n

                        tracker._refs[key] = weakref.ref(st, _free)
                        tracker.live += n
                        tracker.peak = max(tracker.peak, tracker.live)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        return False


def time_steps(model, steps: dict, device: str, repeats: int) -> dict:
    """Median seconds per forward+backward; variants interleaved (order rotated each round) so that load drift and
    allocator effects hit them alike."""
    import torch

    times = {k: [] for k in steps}
    for k, step in steps.items():  # warm-up
        model.zero_grad(set_to_none=True)
        step().backward()
    items = list(steps.items())
    for r in range(repeats):
        # rotate the order each round: the first variant after another's large frees pays the page faults
        for k, step in items[r % len(items):] + items[: r % len(items)]:
            model.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step().backward()
            if device == "cuda":
                torch.cuda.synchronize()
            times[k].append(time.perf_counter() - t0)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def table_rows(shape: str, e: int, tim: dict, mem: dict) -> list:
    """One row per variant: time and memory, against ``naive a=0`` and against ``a=0`` of the same path."""
    rows = []
    b_t, b_m = tim[("naive", 0.0)], mem[("naive", 0.0)]
    for (path, alpha) in [v for v in VARIANTS if v in tim]:
        t, m = tim[(path, alpha)], mem[(path, alpha)]
        rows.append(dict(
            shape=shape, variant=f"{path} a={alpha}", e=e, time_ms=1000 * t, peak_mb=m / 2**20,
            time_vs_naive0=t / b_t, mem_vs_naive0=m / b_m,
            time_vs_same_path_a0=t / tim[(path, 0.0)], mem_vs_same_path_a0=m / mem[(path, 0.0)],
            mem_vs_ckpt_same_alpha=m / mem[("ckpt", alpha)] if ("ckpt", alpha) in mem else None,
        ))
    return rows


def print_table(rows: list) -> None:
    print("| shape | variant | step ms | peak MB | time / naive a=0 | mem / naive a=0 | time / a=0 (same path) "
          "| mem / a=0 (same path) | mem / ckpt (same alpha) |")
    print("|" + "---|" * 9)
    for r in rows:
        ckpt = f"{r['mem_vs_ckpt_same_alpha']:.3f}" if r["mem_vs_ckpt_same_alpha"] is not None else "-"
        print(f"| {r['shape']} | {r['variant']} | {r['time_ms']:.0f} | {r['peak_mb']:.1f} | "
              f"{r['time_vs_naive0']:.3f} | "
              f"{r['mem_vs_naive0']:.3f} | {r['time_vs_same_path_a0']:.3f} | {r['mem_vs_same_path_a0']:.3f} | "
              f"{ckpt} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--shapes", nargs="+", default=None, help=f"from {list(SHAPES)}")
    ap.add_argument("--steps", type=positive_int, default=3, help="timed steps per variant (median reported)")
    ap.add_argument("--e", type=positive_int, default=None, help="shift between windows (default L/4)")
    ap.add_argument("--seq-len", type=positive_int, default=None, help="override L of the chosen shapes")
    ap.add_argument("--output", default=None, help="also write the rows as JSON here")
    ap.add_argument("--threads", type=positive_int, default=None,
                    help="torch intra-op threads (default: torch's); 1 is steadier on a CPU shared with other jobs")
    args = ap.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"  device {args.device}, {torch.get_num_threads()} intra-op threads, {args.steps} timed steps per variant",
          file=sys.stderr)
    shapes = args.shapes or ([k for k in SHAPES if k.startswith(args.device)])
    if args.seq_len:
        for k in shapes:
            SHAPES[k]["L"] = args.seq_len
    rows = []
    for shape in shapes:
        e = args.e or SHAPES[shape]["L"] // 4
        model, steps = build(shape, args.device, e)
        mem = {k: peak_bytes(model, st, args.device) for k, st in steps.items()}
        tim = time_steps(model, steps, args.device, args.steps)
        print(f"  {shape} done", file=sys.stderr)
        rows += table_rows(shape, e, tim, mem)
        del model, steps
    print_table(rows)
    if args.output:
        with open(args.output, "w") as f:
            from torchtune_longshort.provenance import provenance

            json.dump({"rows": rows, "provenance": provenance(device=args.device)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
