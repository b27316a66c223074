"""A divergence of one's own on the fused loss path: autograd's generic gradient against the hand-written one.

    python benchmarks/divergence_generic.py [--vocab 8192] [--dim 256] [--seq-len 512] [--e-frac 0.25]
        [--chunks 8] [--repeats 5] [--threads N]

One forward and backward of :class:`LongShortLoss` (alpha 0.1, float32) on its fused hidden-state path, as
``fused_loss_memory.py`` runs it, with ``divergence="jeffreys"`` (the hand-written logit gradient of
``loss/pair_gradients.py``) and with :func:`jeffreys_copy` named by its dotted path (this module's copy of
``jeffreys_per_position``: no hand-written gradient, so autograd on each block of aligned pairs,
``loss/own_divergence.py``); at alpha 0 for the CE's own share. Time: the median of ``--repeats`` calls after one
warm-up; peak: live tensor bytes above what was live before the call (``loss_overhead.LiveTensorBytes``), a run of
its own. The two losses are printed too (they agree to float32 rounding).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import positive_int  # noqa: E402  (benchmarks/, on the path)

OWN = "divergence_generic.jeffreys_copy"


def jeffreys_copy(logits_p, logits_q):
    """KL(p||q) + KL(q||p) per position, float32: a copy of the shipped jeffreys."""
    lp, lq = F.log_softmax(logits_p.float(), -1), F.log_softmax(logits_q.float(), -1)
    return ((lp.exp() - lq.exp()) * (lp - lq)).sum(-1)


def _step(vocab, dim, L, e, divergence, chunks, alpha):
    from torchtune_longshort.loss import LongShortLoss

    torch.manual_seed(0)
    out = torch.nn.Linear(dim, vocab, bias=False)
    ha = torch.randn(1, L, dim, requires_grad=True)
    hb = torch.randn(1, L, dim, requires_grad=True)
    la, lb = torch.randint(0, vocab, (1, L)), torch.randint(0, vocab, (1, L))
    fn = LongShortLoss(alpha=alpha, divergence=divergence, num_chunks=chunks)
    fn.linear_projection = out  # the hidden-state path, as set_model_output sets it

    def run():
        ha.grad = hb.grad = out.weight.grad = None
        res = fn(ha, hb, la, lb, e)
        res.loss.backward()
        return float(res.loss.detach())

    return run


def measure(vocab, dim, L, e, rows, chunks, repeats):
    """``(loss, median seconds, peak bytes)`` per row ``(name, alpha)``; the rows' calls timed in turn, round after
    round, so a neighbour's load on a shared CPU falls on each alike."""
    from loss_overhead import LiveTensorBytes

    runs = [_step(vocab, dim, L, e, name, chunks, alpha) for name, alpha in rows]
    losses = [run() for run in runs]  # warm-up (and the registry's import of a dotted path)
    times = [[] for _ in runs]
    for _ in range(repeats):
        for run, ts in zip(runs, times):
            t0 = time.perf_counter()
            run()
            ts.append(time.perf_counter() - t0)
    peaks = []
    for name, alpha in rows:
        run = _step(vocab, dim, L, e, name, chunks, alpha)
        with LiveTensorBytes() as mem:
            run()
        peaks.append(mem.peak)
    return [(loss, statistics.median(ts), peak) for loss, ts, peak in zip(losses, times, peaks)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=positive_int, default=8192)
    ap.add_argument("--dim", type=positive_int, default=256)
    ap.add_argument("--seq-len", type=positive_int, default=512)
    ap.add_argument("--e-frac", type=float, default=0.25, help="e = this x L")
    ap.add_argument("--chunks", type=positive_int, default=8)
    ap.add_argument("--repeats", type=positive_int, default=5)
    ap.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    L, e = args.seq_len, int(args.e_frac * args.seq_len)
    print(f"vocab {args.vocab}, d {args.dim}, L {L}, e {e}, {args.chunks} chunks, float32, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    rows = [("jeffreys", "hand-written", "jeffreys", 0.1),
            ("jeffreys (own copy)", "generic (autograd)", OWN, 0.1)]
    print("| divergence | gradient | loss | fwd+bwd ms | peak MiB | time / hand-written | peak / hand-written |")
    print("|---|---|---|---:|---:|---:|---:|")
    results = measure(args.vocab, args.dim, L, e, [(name, alpha) for _, _, name, alpha in rows], args.chunks,
                      args.repeats)
    _, ref_t, ref_peak = results[0]
    for (label, grad, _, _), (loss, t, peak) in zip(rows, results):
        print(f"| {label} | {grad} | {loss:.6f} | {t * 1e3:.1f} | {peak / 2**20:.1f} | {t / ref_t:.2f} | "
              f"{peak / ref_peak:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
