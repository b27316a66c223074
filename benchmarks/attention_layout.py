"""Causal SDPA by the memory layout of q, k and v, as each lm-eval model hands them over (multi-head attention, the
P3 shape): which backend torch picks, and forward (and backward) milliseconds.

    python benchmarks/attention_layout.py [--lengths 1024,2048] [--heads 32] [--head-dim 128] [--device cpu|cuda]
        [--dtype bfloat16] [--reps 7] [--backward] [--out benchmarks/results/attention_layout.json]

Layouts (``[b, h, s, d]`` shapes; what differs is where the bytes lie):

- ``torchtune``: q, k and v are transposed views of ``[b, s, h, d]`` projections (torchtune's
  ``MultiHeadAttention``: our ``longshort`` model and our recipe);
- ``hf``: q a view as above, k and v contiguous ``[b, h, s, d]`` (transformers' KV cache concatenates them: lm-eval's
  ``hf`` model, even for one forward); its row adds the milliseconds of those two copies (``copy_ms``);
- ``contiguous``: all three contiguous ``[b, h, s, d]``.

Each rep times every layout once, the order rotating; medians. ``max_abs_diff`` is each layout's largest difference
from the ``torchtune`` output (the same kernel on other strides should give the same values, or nearly).
On the GPU at P3's 32k, ``longshort`` was 0.99x ``hf``'s tokens/s while ahead at 8k: this says whether the layout
(and the backend it selects) is the difference. :func:`contiguous_kv` gives a loaded model ``hf``'s layout, for the
eval part of :mod:`gpu_suite` to time both ways.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

LAYOUTS = ("torchtune", "hf", "contiguous")


def backend_name(q, k, v) -> str:
    """The SDPA backend torch selects for causal attention on these tensors (``FLASH_ATTENTION``, ...)."""
    import torch
    from torch.nn.attention import SDPBackend

    return SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, True)).name


def _inputs(layout: str, base, grad: bool):
    """``(q, k, v)`` in ``layout`` from three ``[b, s, h, d]`` tensors."""
    q, k, v = (t.transpose(1, 2) for t in base)
    if layout == "hf":
        k, v = k.contiguous(), v.contiguous()
    elif layout == "contiguous":
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if grad:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    return q, k, v


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3


def measure(lengths, heads: int = 32, head_dim: int = 128, device: str = "cpu", dtype: str = "bfloat16",
            reps: int = 7, backward: bool = False, log=print) -> list:
    """One row per (length, layout): backend, forward ms (median of ``reps``), fwd+bwd ms with ``backward``, the
    ms of ``hf``'s two k/v copies, the ratio to ``torchtune``'s forward, and the output's difference from it."""
    rows = []
    for L in lengths:  # one length's tensors are freed before the next length's are made
        rows += _one_length(L, heads, head_dim, device, dtype, reps, backward, log)
    return rows


def _one_length(L, heads, head_dim, device, dtype, reps, backward, log) -> list:
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device="cpu").manual_seed(L)
    base = [torch.randn(1, L, heads, head_dim, generator=gen).to(device=device, dtype=getattr(torch, dtype))
            for _ in range(3)]
    ins = {lay: _inputs(lay, base, False) for lay in LAYOUTS}
    ref = F.scaled_dot_product_attention(*ins["torchtune"], is_causal=True)
    out = {lay: F.scaled_dot_product_attention(*ins[lay], is_causal=True) for lay in LAYOUTS}  # warm-up
    fwd, both = {lay: [] for lay in LAYOUTS}, {lay: [] for lay in LAYOUTS}
    copies = []
    grads = {lay: _inputs(lay, base, True) for lay in LAYOUTS} if backward else {}
    # the output's gradient as both models hand it back: a transposed view of a [b, s, h, d] tensor
    g = torch.randn(1, L, heads, head_dim, generator=gen).to(device=device, dtype=base[0].dtype).transpose(1, 2)

    def step(lay):
        for t in grads[lay]:
            t.grad = None
        F.scaled_dot_product_attention(*grads[lay], is_causal=True).backward(g)

    if backward:
        for lay in LAYOUTS:
            step(lay)  # warm-up
    views = [t.transpose(1, 2) for t in base[1:]]
    for r in range(reps):
        for lay in LAYOUTS[r % 3:] + LAYOUTS[:r % 3]:  # the order rotates from rep to rep
            fwd[lay].append(_timed(lambda: F.scaled_dot_product_attention(*ins[lay], is_causal=True), device))
            if backward:
                both[lay].append(_timed(lambda: step(lay), device))
        copies.append(_timed(lambda: [t.contiguous() for t in views], device))
    base_ms = statistics.median(fwd["torchtune"])
    rows = []
    for lay in LAYOUTS:
        ms = statistics.median(fwd[lay])
        row = {"L": L, "layout": lay, "backend": backend_name(*ins[lay]), "fwd_ms": ms,
               "fwd_bwd_ms": statistics.median(both[lay]) if backward else None,
               "copy_ms": statistics.median(copies) if lay == "hf" else 0.0,
               "fwd_vs_torchtune": ms / base_ms,
               "max_abs_diff": (out[lay].float() - ref.float()).abs().max().item()}
        rows.append(row)
        log(f"    attention L {L} {lay:10s} {row['backend']:20s} fwd {ms:8.2f} ms"
            + (f"  fwd+bwd {row['fwd_bwd_ms']:8.2f} ms" if backward else ""))
    return rows


def markdown(rows) -> str:
    """The rows as one markdown table."""
    head = "| L | layout | backend | forward ms | forward / torchtune's | fwd+bwd ms | k/v copies ms | max abs diff |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        fb = "" if r["fwd_bwd_ms"] is None else f"{r['fwd_bwd_ms']:.2f}"
        lines.append(f"| {r['L']} | {r['layout']} | {r['backend']} | {r['fwd_ms']:.2f} | {r['fwd_vs_torchtune']:.3f} "
                     f"| {fb} | {r['copy_ms']:.2f} | {r['max_abs_diff']:.1e} |")
    return "\n".join(lines)


@contextmanager
def contiguous_kv(model):
    """Inside the block, every torchtune ``MultiHeadAttention`` of ``model`` hands SDPA contiguous k and v (``hf``'s
    layout, one copy each a layer); outside it, its own views again."""
    from torchtune.modules import MultiHeadAttention

    patched = []
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            original = m._attention_call

            def call(q, k, v, *args, original=original, **kwargs):
                return original(q, k.contiguous(), v.contiguous(), *args, **kwargs)

            had = "_attention_call" in vars(m)
            m._attention_call = call
            patched.append((m, original, had))
    if not patched:
        raise ValueError(f"contiguous_kv: {type(model).__name__} has no torchtune MultiHeadAttention")
    try:
        yield model
    finally:
        for m, original, had in patched:
            if had:
                m._attention_call = original
            else:
                del m._attention_call


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="1024,2048")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--backward", action="store_true", help="also time forward + backward (training's attention)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "attention_layout.json",
                    help="the JSON written (default: benchmarks/results/attention_layout.json beside this script)")
    args = ap.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        ap.error(f"--lengths {args.lengths!r}: comma-separated token counts, such as 1024,2048")
    if min(lengths) < 1 or args.reps < 1:
        ap.error("--lengths and --reps: at least 1")
    if args.heads < 1 or args.head_dim < 1:
        ap.error(f"--heads {args.heads} --head-dim {args.head_dim}: each at least 1")
    if args.out.is_dir():
        ap.error(f"--out {args.out}: a folder; pass the JSON file to write, such as "
                 f"{args.out / 'attention_layout.json'}")
    import torch

    try:
        device = torch.device(args.device)
    except RuntimeError:
        ap.error(f"--device {args.device!r}: not a torch device; use cpu or cuda[:N]")
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: no CUDA device here; use --device cpu")
    rows = measure(lengths, args.heads, args.head_dim, args.device, args.dtype, args.reps, args.backward,
                   log=lambda s: print(s, file=sys.stderr))
    print(markdown(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from torchtune_longshort.provenance import provenance

    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                    "provenance": provenance(device=args.device)}, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
