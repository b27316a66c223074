"""The alignment term's part of the fused loss (:mod:`.fused_linear`): per divergence, the values and the logit
gradients of one block of aligned pairs, written into buffers the chunk already holds.

Gradients of one position's divergence w.r.t. the logits ``z_A`` (``p = softmax(z_A)``, ``q = softmax(z_B)``,
``lp, lq`` their logs; ``<., .>`` a sum over the vocabulary); ``z_B``'s are the same with A and B swapped:

- SCE ``-(<q, lp> + <p, lq>)``: ``(p - q) - p * (lq - <p, lq>)``
- Jeffreys ``<p - q, lp - lq>``: ``p * (d - <p, d>) + (p - q)``, ``d = lp - lq``
- JS ``(KL(p||m) + KL(q||m)) / 2``, ``m = (p + q) / 2``: ``p * (r - <p, r>) / 2``, ``r = lp - log m``

(``d/dz_j`` of ``<p, f>`` is ``p_j (f_j - <p, f>)`` plus ``<p, df/dz_j>``; ``d lp_i / dz_j = delta_ij - p_j``.)
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from torchtune_longshort.loss.divergences import divergence_fn
from torchtune_longshort.loss.own_divergence import autograd_block

_LN2 = math.log(2.0)


# The vocabulary is summed in blocks of this many entries by a matmul each, the blocks' sums added by ``torch.sum``:
# one matmul over a whole 49k-128k vocabulary adds its float32 terms in long runs on a CPU (SmolLM2's SCE off by
# 3e-5 and JS by 5e-4 relative in float32, against 1e-6 for the unfused path); in blocks, 3-8e-6.
DOT_BLOCK = 4096


def _dot(x: torch.Tensor, y: torch.Tensor, buf: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``<x, y>`` over the last dim, keeping it (``[..., 1]``). With ``buf`` (a free ``[..., V]`` buffer of the
    chunk's): the product written there and summed (``torch.sum``'s pairwise order: as exact as the unfused path).
    Without: batched matmuls over vocabulary blocks (:data:`DOT_BLOCK`), no ``[..., V]`` temporary."""
    if buf is not None:
        return torch.mul(x, y, out=buf).sum(-1, keepdim=True)
    v = x.shape[-1]
    whole = v - v % DOT_BLOCK
    out = None
    if whole:
        blocks = (x[..., :whole].unflatten(-1, (whole // DOT_BLOCK, DOT_BLOCK)).unsqueeze(-2)
                  @ y[..., :whole].unflatten(-1, (whole // DOT_BLOCK, DOT_BLOCK)).unsqueeze(-1))
        out = blocks[..., 0, 0].sum(-1, keepdim=True)
    if whole < v:
        rest = torch.matmul(x[..., whole:].unsqueeze(-2), y[..., whole:].unsqueeze(-1))[..., 0]
        out = rest if out is None else out.add_(rest)
    return out


# Per divergence: one block of aligned pairs (``[b, n, V]`` views of a chunk's rows). Each function writes into
# ``out_v`` (``[b, n, 1]``) a per-position quantity whose sum gives the divergence sum as ``VALUE_AFFINE`` says,
# and, where ``want_a`` / ``want_b``, overwrites ``lpa`` / ``lpb`` with the rows' whole ``dloss/dlogits`` but for
# the CE's one-hot term: ``w`` times the divergence's logit gradient (module doc) plus the CE's ``rw * p``. ``tmp`` is
# one ``[b, n, V]`` float32 buffer; nothing else of that size is allocated. Returns ``(wrote_a, wrote_b)``.
# The log-probabilities are consumed (a row's gradient is written over them): the caller needs only ``p`` after.
def _sce_block(lpa, lpb, pa, pb, out_v, tmp, want_a, want_b, w, rw_a, rw_b):
    # dSCE/dz_A = p (<p, lq> - lq) + p - q, so w dSCE/dz_A + rw p = p (w (<p, lq> + 1) + rw - w lq) - w q
    s_a, s_b = _dot(pa, lpb, tmp), _dot(pb, lpa, tmp)  # <p, lq>, <q, lp> (tmp is free until B's gradient)
    torch.add(s_a, s_b, out=out_v)
    if not want_b:  # want_a implies want_b (stop_grad_long drops A's only)
        return False, False
    torch.add(s_b.add(1.0).mul_(w).add_(rw_b), lpa, alpha=-w, out=tmp)  # B's needs lp: taken before lpa is overwritten
    if want_a:
        torch.add(s_a.add(1.0).mul_(w).add_(rw_a), lpb, alpha=-w, out=lpa).mul_(pa).add_(pb, alpha=-w)
    torch.mul(tmp, pb, out=lpb).add_(pa, alpha=-w)
    return want_a, True


def _jeffreys_block(lpa, lpb, pa, pb, out_v, tmp, want_a, want_b, w, rw_a, rw_b):
    # d = lp - lq; dJ/dz_A = p (d - <p, d>) + p - q, dJ/dz_B = q (<q, d> - d) + q - p
    d = torch.sub(lpa, lpb, out=tmp)
    p_d, q_d = _dot(pa, d), _dot(pb, d)
    torch.sub(p_d, q_d, out=out_v)
    if want_a:
        torch.add(p_d.neg().add_(1.0).mul_(w).add_(rw_a), d, alpha=w, out=lpa).mul_(pa).add_(pb, alpha=-w)
    if want_b:
        torch.add(q_d.add(1.0).mul_(w).add_(rw_b), d, alpha=-w, out=lpb).mul_(pb).add_(pa, alpha=-w)
    return want_a, want_b


def _js_block(lpa, lpb, pa, pb, out_v, tmp, want_a, want_b, w, rw_a, rw_b):
    # with lm' = log(p + q) = log m + ln 2: r = lp - log m = (lp - lm') + ln 2, and ln 2 cancels in r - <p, r>;
    # dJS/dz_A = p (r - <p, r>) / 2
    lm = torch.logaddexp(lpa, lpb, out=tmp)
    ra, rb = lpa.sub_(lm), lpb.sub_(lm)
    p_r, q_r = _dot(pa, ra, tmp), _dot(pb, rb, tmp)  # log m is spent: tmp is free
    torch.add(p_r, q_r, out=out_v)
    if want_a:
        ra.mul_(0.5 * w).add_(p_r.mul(-0.5 * w).add_(rw_a)).mul_(pa)
    if want_b:
        rb.mul_(0.5 * w).add_(q_r.mul(-0.5 * w).add_(rw_b)).mul_(pb)
    return want_a, want_b


PAIR_BLOCKS = {"sce": _sce_block, "jeffreys": _jeffreys_block, "js": _js_block}
# sum over positions of the divergence = scale * sum(v) + shift * n_positions, v as the block functions write it
VALUE_AFFINE = {"sce": (-1.0, 0.0), "jeffreys": (1.0, 0.0), "js": (0.5, _LN2)}
# A chunk's pairs are taken in blocks of at most 1 / PAIR_BLOCK_SPLIT of the chunk's rows per window, so the one
# extra [block, vocab] buffer alpha > 0 needs is a fraction of the [rows, vocab] buffers every chunk holds anyway.
PAIR_BLOCK_SPLIT = 8


def _shipped(name: str):
    """The shipped name of divergence ``name``: itself, or the one whose function a dotted path names
    (``torchtune_longshort.loss.divergences.js_per_position``); None for a function of one's own."""
    if name in PAIR_BLOCKS:
        return name
    fn = divergence_fn(name)  # raises with the accepted names
    return next((k for k in PAIR_BLOCKS if divergence_fn(k) is fn), None)


def has_hand_written_gradient(name: str) -> bool:
    return _shipped(name) is not None


def block_fn(name: str):
    """The block function of divergence ``name``: its hand-written gradient, else (a divergence of one's own)
    autograd on each block (:func:`~torchtune_longshort.loss.own_divergence.autograd_block`)."""
    shipped = _shipped(name)
    return PAIR_BLOCKS[shipped] if shipped else autograd_block(divergence_fn(name))


def value_affine(name: str):
    """``(scale, shift)`` of :data:`VALUE_AFFINE` for ``name``; a block of autograd writes the values as they are."""
    shipped = _shipped(name)
    return VALUE_AFFINE[shipped] if shipped else (1.0, 0.0)
