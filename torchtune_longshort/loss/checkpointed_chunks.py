"""The checkpointed and logits paths of :class:`~torchtune_longshort.loss.LongShortLoss`: per chunk of the shared
target index, the output module called as is on the chunk's hidden states (or the logits the model gave), float32
cross-entropy of both windows and the divergence at the chunk's aligned pairs. Each chunk runs under activation
checkpointing, so its logits are recomputed in backward instead of kept (the fused path, which keeps none and
recomputes none, is :mod:`torchtune_longshort.loss.fused_linear`).
"""

from __future__ import annotations

from typing import List

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from torchtune_longshort.loss.divergences import divergence_fn


def checkpointed_terms(a_parts, b_parts, labels_a, labels_b, project, chunks, mode, ignore_index, divergence,
                       stop_grad_long, recompute_logits):
    """The checkpointed / logits path of :class:`~torchtune_longshort.loss.LongShortLoss`: ``(ce_a_sum, ce_b_sum,
    div_sum)`` over ``chunks`` (:func:`~torchtune_longshort.loss.chunking.target_chunks`), each chunk under
    activation checkpointing when ``recompute_logits`` and a gradient is needed. ``project``: the output module (hidden
    states given), or None (logits given); ``mode``: ``"train"``, ``"report"`` or None (no divergence)."""
    ce_a = ce_b = div = None
    for c in chunks:
        a_lo, a_hi, b_lo, b_hi, n_pairs = c.a_lo, c.a_hi, c.b_lo, c.b_hi, c.n_pairs
        xa = slice_parts(a_parts, a_lo, a_hi) if a_hi > a_lo else None
        xb = slice_parts(b_parts, b_lo, b_hi) if b_hi > b_lo else None
        la = labels_a[:, a_lo:a_hi] if xa is not None else None
        lb = labels_b[:, b_lo:b_hi] if xb is not None else None
        pair_a = (c.pair_a, n_pairs)
        pair_b = (c.pair_b, n_pairs)
        fn = ChunkTerms(project, ignore_index, divergence, mode if n_pairs > 0 else None, stop_grad_long, pair_a,
                        pair_b)
        tensors = [t for t in (xa, xb) if t is not None]
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if recompute_logits and needs_grad:
            terms = checkpoint(fn, xa, xb, la, lb, use_reentrant=False)
        else:
            terms = fn(xa, xb, la, lb)
        ce_a = _acc(ce_a, terms[0])
        ce_b = _acc(ce_b, terms[1])
        div = _acc(div, terms[2])
    return ce_a, ce_b, div


class ChunkTerms:
    """One chunk's (ce_A sum, ce_B sum, divergence sum); a plain callable so checkpoint can re-run it."""

    def __init__(self, project, ignore_index, divergence, mode, stop_grad_long, pair_a, pair_b):
        self.project = project
        self.ignore_index = ignore_index
        self.div = divergence_fn(divergence)
        self.mode = mode  # "train": divergence with graph; "report": detached, for logging; None: skip
        self.stop_grad_long = stop_grad_long
        self.pair_a = pair_a
        self.pair_b = pair_b

    def __call__(self, xa, xb, la, lb):
        ga = self._logits(xa)
        gb = self._logits(xb)
        ce_a = self._ce(ga, la)
        ce_b = self._ce(gb, lb)
        div = None
        if self.mode is not None:
            (ia, n), (ib, _) = self.pair_a, self.pair_b
            pa, pb = ga[:, ia : ia + n], gb[:, ib : ib + n]
            if self.mode == "report":
                with torch.no_grad():
                    div = self.div(pa, pb).sum()
            else:
                if self.stop_grad_long:
                    pa = pa.detach()
                div = self.div(pa, pb).sum()
        return ce_a, ce_b, div

    def _logits(self, x):
        if x is None:
            return None
        if self.project is None:
            return x
        # x.view(x.shape): the standard strides, in a size-1 batch dimension too (a chunk of a one-row batch keeps
        # the whole window's stride there). FSDP2's forward hook views a unit's input and the checkpoint's recompute
        # runs without it, so matmul folded the rows into one mm in the forward and ran bmm in the recompute, and
        # the checkpoint refused the different saved tensors (a LoRA output under torchrun, one sample per rank).
        return self.project(x.view(x.shape))

    def _ce(self, logits, labels):
        if logits is None:
            return None
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
            ignore_index=self.ignore_index, reduction="sum",
        )


def slice_parts(parts: List[torch.Tensor], lo: int, hi: int) -> torch.Tensor:
    """Positions ``[lo, hi)`` along dim 1 of the concatenation of ``parts``, copying only what is needed."""
    if len(parts) == 1:
        return parts[0][:, lo:hi]
    out, start = [], 0
    for p in parts:
        end = start + p.shape[1]
        if end > lo and start < hi:
            out.append(p[:, max(lo, start) - start : min(hi, end) - start])
        start = end
    return out[0] if len(out) == 1 else torch.cat(out, dim=1)


def _acc(total, term):
    if term is None:
        return total
    return term if total is None else total + term
