"""The long-short misalignment term over the two windows of one ``L + e`` token sample (paper Sec. 4, Eq. 3).

Which positions are compared (window A's ``j`` against window B's ``j - e``, above the ``min_context`` floor) is the
window geometry's to say: :mod:`torchtune_longshort.windows`. This is the readable full-logits version of the term;
:class:`~torchtune_longshort.loss.longshort_loss.LongShortLoss` computes the same chunk by chunk.
"""

from __future__ import annotations

import torch

from torchtune_longshort.loss.divergences import DEFAULT_DIVERGENCE, divergence_fn, masked_mean
from torchtune_longshort.windows import DEFAULT_MIN_CONTEXT, MinContext, aligned_positions


def misalignment_loss(
    logits_a: torch.Tensor,
    logits_b: torch.Tensor,
    e: int,
    min_context: MinContext = DEFAULT_MIN_CONTEXT,
    divergence: str = DEFAULT_DIVERGENCE,
    stop_grad_long: bool = False,
) -> torch.Tensor:
    """Mean divergence between windows A and B at their shared targets (full logits; the readable version).

    Args:
        logits_a: ``[b, L, vocab]`` logits of window A (tokens ``[0, L)`` of the sample).
        logits_b: ``[b, L, vocab]`` logits of window B (tokens ``[e, L + e)``).
        e: the shift, in ``[1, L]``.
        min_context: the floor (:mod:`torchtune_longshort.windows`).
        divergence: a name in :data:`~torchtune_longshort.loss.divergences.DIVERGENCES` (``"sce"``: the paper's).
        stop_grad_long: detach window A (the longer contexts), so only B is pulled towards A.

    Returns:
        float32 scalar; 0 (not NaN) when no positions are compared.
    """
    if logits_a.dim() != 3 or logits_b.dim() != 3:
        raise ValueError(
            f"logits_a/logits_b must be [batch, L, vocab]; got {tuple(logits_a.shape)} and {tuple(logits_b.shape)}"
        )
    if logits_a.shape != logits_b.shape:
        divergence_fn(divergence)(logits_a[:, :0], logits_b[:, :0])  # raises the vocab / batch message
        # the same batch and vocabulary but not the same L: window B was sliced at A's positions without a word
        raise ValueError(f"logits_a has {logits_a.shape[1]} positions, logits_b {logits_b.shape[1]}: both windows "
                         "hold L positions (window A = tokens [0, L), window B = tokens [e, L + e))")
    L = logits_a.shape[1]
    pos = aligned_positions(L, e, min_context)
    la = logits_a[:, pos.a_start : pos.a_start + pos.n]
    lb = logits_b[:, pos.b_start : pos.b_start + pos.n]
    if stop_grad_long:
        la = la.detach()
    return masked_mean(divergence_fn(divergence)(la, lb))
