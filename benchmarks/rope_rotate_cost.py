"""Cost of applying RoPE in eager mode: the package's ``rotate`` (one complex multiply for interleaved pairs)
against the real formula it replaced (four products, two sums and a stack, in float32), torchtune's
``RotaryPositionalEmbeddings`` and transformers' ``rotate_half`` (the ``hf`` model's, in the input's dtype).

One query tensor ``[1, L, heads, head_dim]`` (default: the GPU suite's P3 shape, a Llama-2-7B width: 32 heads of
128), forward and, with ``--backward``, forward + backward. All variants timed in this process, interleaved, median
of ``--repeats``; ratios against the real formula. Bit equality of ``rotate`` with the real formula is checked on
the same tensor (the test is ``tests/test_rope_formulas.py``).

Run:  python benchmarks/rope_rotate_cost.py [--lengths 2048,8192] [--dtypes bf16,fp32] [--repeats 7] [--backward]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import names_from, positive_int, positive_ints  # noqa: E402  (benchmarks/: not a package)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def real_formula(x, cos, sin):
    """The interleaved rotation as the package computed it before (and torchtune's module does): float32 pairs."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xs[..., 0], xs[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1).flatten(3).type_as(x)


def variants(L: int, heads: int, head_dim: int, dtype):
    """``{name: (fn, input)}``: each variant's rotation of one ``[1, L, heads, head_dim]`` tensor."""
    from torchtune.modules import RotaryPositionalEmbeddings
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from torchtune_longshort.rope import build_rope, rotate

    rope = build_rope("linear", head_dim=head_dim, max_seq_len=L, factor=8.0)
    cos, sin = rope.cos_sin(L, None)
    tt = RotaryPositionalEmbeddings(head_dim, max_seq_len=L)
    # transformers' layout: [b, heads, L, head_dim] and cos/sin [b, L, head_dim] in the input's dtype
    ang = torch.cat([torch.atan2(sin, cos)] * 2, dim=-1).view(1, L, head_dim)
    hcos, hsin = ang.cos().to(dtype), ang.sin().to(dtype)
    return {
        "real formula (before)": lambda x: real_formula(x, cos, sin),
        "rotate (complex multiply)": lambda x: rotate(x, cos, sin, "interleaved"),
        "torchtune RotaryPositionalEmbeddings": lambda x: tt(x),
        # it rotates q and k together: k here is one head, so the row times q's rotation
        "transformers rotate_half (hf)": lambda x: apply_rotary_pos_emb(x.transpose(1, 2), x[:, :, :1].transpose(1, 2),
                                                                         hcos, hsin)[0],
    }, (cos, sin)


def timed(fn, x, backward: bool) -> float:
    t0 = time.perf_counter()
    if backward:
        xg = x.detach().requires_grad_(True)
        fn(xg).float().sum().backward()
    else:
        with torch.no_grad():
            fn(x)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=positive_ints, default="2048,8192")
    p.add_argument("--dtypes", type=names_from(*DTYPES), default="bf16,fp32")
    p.add_argument("--heads", type=positive_int, default=32)
    p.add_argument("--head-dim", type=positive_int, default=128)
    p.add_argument("--repeats", type=positive_int, default=7)
    p.add_argument("--backward", action="store_true", help="time forward + backward (training), not forward alone")
    a = p.parse_args(argv)
    what = "forward + backward" if a.backward else "forward"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {what}, [1, L, {a.heads}, {a.head_dim}], "
          f"median of {a.repeats}, interleaved\n")
    print("| L | dtype | variant | ms | / real formula | equal to the real formula |\n|---|---|---|---|---|---|")
    for L in a.lengths:
        for dname in a.dtypes:
            dtype = DTYPES[dname]
            fns, (cos, sin) = variants(L, a.heads, a.head_dim, dtype)
            torch.manual_seed(0)
            x = torch.randn(1, L, a.heads, a.head_dim, dtype=dtype)
            same = torch.equal(fns["rotate (complex multiply)"](x), real_formula(x, cos, sin))
            times = {n: [] for n in fns}
            for n, fn in fns.items():  # warm-up
                timed(fn, x, a.backward)
            for _ in range(a.repeats):
                for n, fn in fns.items():
                    times[n].append(timed(fn, x, a.backward))
            base = statistics.median(times["real formula (before)"])
            for n, ts in times.items():
                med = statistics.median(ts)
                eq = {"rotate (complex multiply)": "yes" if same else "**no**"}.get(n, "")
                print(f"| {L} | {dname} | {n} | {med * 1e3:.1f} | {med / base:.2f} | {eq} |")


if __name__ == "__main__":
    main()
