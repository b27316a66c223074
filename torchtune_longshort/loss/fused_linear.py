"""Fused output projection + cross-entropy + divergence for :class:`LongShortLoss`'s hidden-state path.

One :class:`torch.autograd.Function` does, per chunk of the shared target index (:mod:`.chunking`):

1. project the chunk's hidden states of both windows with the output weight (one matmul);
2. take float32 log-softmaxes (the model may run in bfloat16);
3. compute the cross-entropy values, the divergence values at the chunk's aligned pairs, and the *analytic*
   gradient of ``loss = (ce_A + ce_B) / 2 + alpha * D`` with respect to the chunk's logits;
4. turn that into the gradients w.r.t. the chunk's hidden states (``dlogits @ W``) and the output weight
   (``dlogits^T @ h``, accumulated over chunks) and drop the logits.

Backward only scales the stored gradients by ``grad_output``. Nothing of size ``[rows, vocab]`` outlives a chunk and
no logits are recomputed: one projection forward and its two gradient matmuls, as in Liger-Kernel's fused linear
cross-entropy, extended to the two-window divergence.

Gradients of one position's divergence w.r.t. the logits ``z_A`` (``p = softmax(z_A)``, ``q = softmax(z_B)``,
``lp, lq`` their logs; ``<., .>`` a sum over the vocabulary); ``z_B``'s are the same with A and B swapped:

- SCE ``-(<q, lp> + <p, lq>)``: ``(p - q) - p * (lq - <p, lq>)``
- Jeffreys ``<p - q, lp - lq>``: ``p * (d - <p, d>) + (p - q)``, ``d = lp - lq``
- JS ``(KL(p||m) + KL(q||m)) / 2``, ``m = (p + q) / 2``: ``p * (r - <p, r>) / 2``, ``r = lp - log m``

(``d/dz_j`` of ``<p, f>`` is ``p_j (f_j - <p, f>)`` plus ``<p, df/dz_j>``; ``d lp_i / dz_j = delta_ij - p_j``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from torchtune_longshort.loss.chunking import TargetChunk

_LN2 = math.log(2.0)


# ---------------------------------------------------------------------------------------------- which module fuses
def plain_linear_weight(module) -> Optional[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """``(weight, bias)`` when ``module`` computes exactly ``F.linear(x, weight, bias)``, else ``None``.

    Accepted: an ``nn.Linear`` whose ``forward`` is ``nn.Linear.forward`` (FSDP2's ``FSDPLinear`` included), and a
    tied output (torchtune's ``TiedLinear``: a plain object holding ``tied_module``, computing
    ``F.linear(x, tied_module.weight)``). Anything else (LoRA on the output, quantized linears, custom modules)
    returns ``None`` and the caller keeps the generic, checkpointed path.
    """
    if isinstance(module, nn.Linear) and type(module).forward is nn.Linear.forward:
        return module.weight, module.bias
    tied = getattr(module, "tied_module", None)
    if not isinstance(module, nn.Module) and isinstance(tied, nn.Module) and isinstance(
        getattr(tied, "weight", None), torch.Tensor
    ):
        return tied.weight, None
    return None


def is_fsdp_module(module) -> bool:
    """True for a module wrapped by FSDP2's ``fully_shard`` (its parameters are sharded DTensors between calls)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without distributed
        return False
    return isinstance(module, FSDPModule)


def is_dtensor(t) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(t, DTensor)


# ---------------------------------------------------------------------------------------------- the computation
@dataclass(frozen=True)
class FusedPlan:
    """What the fused function needs besides tensors (all fixed before the first chunk).

    ``mode``: ``"train"`` (divergence with gradient), ``"report"`` (its value only, for logging) or ``None``.
    ``w_div``: ``alpha / (batch * n_aligned)``, the weight of one position's divergence in the loss.
    """

    chunks: Tuple[TargetChunk, ...]
    divergence: str
    mode: Optional[str]
    stop_grad_long: bool
    ignore_index: int
    w_div: float


def _div_values_and_grads(name: str, lpa, lpb, want_a: bool, want_b: bool):
    """Per-position divergence values ``[...]`` and (unscaled) logit gradients for windows A and B (module doc)."""
    pa, pb = lpa.exp(), lpb.exp()
    ga = gb = None
    if name == "sce":
        pa_lqb = (pa * lpb).sum(-1, keepdim=True)  # <p, lq>
        pb_lpa = (pb * lpa).sum(-1, keepdim=True)  # <q, lp>
        values = -(pa_lqb + pb_lpa)[..., 0]
        if want_a:
            ga = (lpb - pa_lqb).mul_(pa).neg_().add_(pa).sub_(pb)
        if want_b:
            gb = (lpa - pb_lpa).mul_(pb).neg_().add_(pb).sub_(pa)
    elif name == "jeffreys":
        d = lpa - lpb
        p_d = (pa * d).sum(-1, keepdim=True)
        q_d = (pb * d).sum(-1, keepdim=True)
        values = (p_d - q_d)[..., 0]
        if want_a:
            ga = (d - p_d).mul_(pa).add_(pa).sub_(pb)
        if want_b:
            gb = (q_d - d).mul_(pb).add_(pb).sub_(pa)
    elif name == "js":
        lm = torch.logaddexp(lpa, lpb).sub_(_LN2)
        ra, rb = lpa - lm, lpb - lm
        del lm
        p_r = (pa * ra).sum(-1, keepdim=True)
        q_r = (pb * rb).sum(-1, keepdim=True)
        values = 0.5 * (p_r + q_r)[..., 0]
        if want_a:
            ga = ra.sub_(p_r).mul_(pa).mul_(0.5)
        if want_b:
            gb = rb.sub_(q_r).mul_(pb).mul_(0.5)
    else:
        raise ValueError(f"divergence={name!r} is not known")
    return values, ga, gb


def fused_terms(
    ha: torch.Tensor,
    hb: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    labels_a: torch.Tensor,
    labels_b: torch.Tensor,
    w_ce_a: torch.Tensor,
    w_ce_b: torch.Tensor,
    plan: FusedPlan,
    grads: Tuple[bool, bool, bool, bool],
):
    """Sums of the loss terms over all chunks, and the loss's gradients.

    Args:
        ha, hb: ``[b, L, d]`` final hidden states of windows A and B.
        weight, bias: the output projection (``[V, d]``, ``[V]`` or ``None``).
        labels_a, labels_b: ``[b, L]`` targets (``plan.ignore_index`` where none).
        w_ce_a, w_ce_b: 0-dim float32 weights of one target's CE in the loss (``1 / (2 n_A)``, ``1 / (2 n_B)``).
        plan: chunks and divergence settings.
        grads: which of ``(ha, hb, weight, bias)`` need a gradient.

    Returns:
        ``(ce_a_sum, ce_b_sum, div_sum)`` float32 0-dim tensors and ``[grad_ha, grad_hb, grad_weight, grad_bias]``
        (``None`` where not asked): the gradients of ``w_ce_a * ce_a_sum + w_ce_b * ce_b_sum + w_div * div_sum``
        (the divergence's part only in mode ``"train"``).
    """
    bsz, L, d = ha.shape
    V = weight.shape[0]
    dev = ha.device
    any_grad = any(grads)
    g_ha = torch.empty(ha.shape, dtype=ha.dtype, device=dev) if grads[0] else None
    g_hb = torch.empty(hb.shape, dtype=hb.dtype, device=dev) if grads[1] else None
    # Accumulated in the weight's dtype, as autograd accumulates the per-chunk weight gradients of the unfused path.
    g_w = torch.zeros_like(weight) if grads[2] else None
    g_bias = torch.zeros(V, dtype=torch.float32, device=dev) if (grads[3] and bias is not None) else None
    ce_a = torch.zeros((), dtype=torch.float32, device=dev)
    ce_b = torch.zeros((), dtype=torch.float32, device=dev)
    div = torch.zeros((), dtype=torch.float32, device=dev)
    train_div = plan.mode == "train"

    for c in plan.chunks:
        na, nb = c.n_a, c.n_b
        ra, rb = bsz * na, bsz * nb  # rows of A and of B in this chunk
        parts: List[torch.Tensor] = []
        if na:
            parts.append(ha[:, c.a_lo : c.a_hi].reshape(ra, d))
        if nb:
            parts.append(hb[:, c.b_lo : c.b_hi].reshape(rb, d))
        h = parts[0] if len(parts) == 1 else torch.cat(parts)
        labels = [t for t in (labels_a[:, c.a_lo : c.a_hi] if na else None, labels_b[:, c.b_lo : c.b_hi] if nb else None)
                  if t is not None]
        y = labels[0].reshape(-1) if len(labels) == 1 else torch.cat([t.reshape(-1) for t in labels])

        logits = F.linear(h, weight, bias)
        lp = torch.log_softmax(logits, dim=-1, dtype=torch.float32)  # float32 even for a bf16 weight
        del logits
        valid = y != plan.ignore_index
        y_safe = torch.where(valid, y, torch.zeros_like(y))
        nll = lp.gather(1, y_safe[:, None])[:, 0].neg_().mul_(valid)
        if ra:
            ce_a += nll[:ra].sum()
        if rb:
            ce_b += nll[ra:].sum()

        ga = gb = None
        if plan.mode is not None and c.n_pairs > 0:
            n = c.n_pairs
            lpa = lp[:ra].view(bsz, na, V)[:, c.pair_a : c.pair_a + n]
            lpb = lp[ra:].view(bsz, nb, V)[:, c.pair_b : c.pair_b + n]
            want_b = train_div and any_grad
            want_a = want_b and not plan.stop_grad_long
            values, ga, gb = _div_values_and_grads(plan.divergence, lpa, lpb, want_a, want_b)
            div += values.sum()

        if not any_grad:
            continue
        # dloss/dlogits, built in place of the softmax: CE rows get w * (p - onehot(y)), pairs add w_div * g.
        dlog = lp.exp_()
        row_w = torch.empty(ra + rb, dtype=torch.float32, device=dev)
        if ra:
            row_w[:ra] = w_ce_a
        if rb:
            row_w[ra:] = w_ce_b
        row_w.mul_(valid)
        dlog.mul_(row_w[:, None])
        dlog.scatter_add_(1, y_safe[:, None], row_w.neg()[:, None])
        if ga is not None:
            dlog[:ra].view(bsz, na, V)[:, c.pair_a : c.pair_a + c.n_pairs].add_(ga, alpha=plan.w_div)
        if gb is not None:
            dlog[ra:].view(bsz, nb, V)[:, c.pair_b : c.pair_b + c.n_pairs].add_(gb, alpha=plan.w_div)
        del ga, gb
        if g_bias is not None:
            g_bias += dlog.sum(0)
        dlog_w = dlog if dlog.dtype == weight.dtype else dlog.to(weight.dtype)
        del dlog
        if g_w is not None:
            g_w.addmm_(dlog_w.t(), h)
        if g_ha is not None or g_hb is not None:
            gh = dlog_w @ weight
            if ra and g_ha is not None:
                g_ha[:, c.a_lo : c.a_hi] = gh[:ra].view(bsz, na, d)
            if rb and g_hb is not None:
                g_hb[:, c.b_lo : c.b_hi] = gh[ra:].view(bsz, nb, d)
        del dlog_w
    if g_bias is not None:
        g_bias = g_bias.to(bias.dtype)
    return (ce_a, ce_b, div), [g_ha, g_hb, g_w, g_bias]


class FusedLinearLongShort(torch.autograd.Function):
    """``loss = w_ce_a * sum ce_A + w_ce_b * sum ce_B [+ w_div * sum D]`` with gradients computed in forward.

    ``forward(ha, hb, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan)`` returns ``(loss, sums)``, ``sums``
    being the detached ``[ce_a_sum, ce_b_sum, div_sum]``. Backward scales the stored gradients by ``grad_output``.
    """

    @staticmethod
    def forward(ctx, ha, hb, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan: FusedPlan):
        need = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2],
                bias is not None and ctx.needs_input_grad[3])
        (ce_a, ce_b, div), grads = fused_terms(ha, hb, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan, need)
        loss = w_ce_a * ce_a + w_ce_b * ce_b
        if plan.mode == "train":
            loss = loss + plan.w_div * div
        sums = torch.stack([ce_a, ce_b, div])
        ctx.mark_non_differentiable(sums)
        ctx.grads = grads
        return loss, sums

    @staticmethod
    def backward(ctx, grad_loss, _grad_sums):
        grads, ctx.grads = ctx.grads, None  # hand the buffers over (autograd can then adopt them as .grad)
        out = []
        for g in grads:
            if g is not None:
                g.mul_(grad_loss.to(g.dtype))
            out.append(g)
        return (*out, None, None, None, None, None)
