"""Divergences between two next-token distributions given as logits (paper Eq. 3 and alternatives).

All three take logits of shape ``[..., vocab]`` and return one value per position (shape ``[...]``), computed in
float32 whatever the input dtype:

- ``sce``: symmetric cross-entropy ``SCE(p, q) = -(<q, log p> + <p, log q>)`` (the paper's Eq. 3, its default).
  Note ``SCE(p, p) = 2 H(p)``, not 0: besides aligning the two distributions it also pushes entropy down.
- ``jeffreys``: symmetric KL ``KL(p||q) + KL(q||p) = <p - q, log p - log q>`` = SCE minus both entropies; 0 iff p = q.
- ``js``: Jensen-Shannon ``(KL(p||m) + KL(q||m)) / 2`` with ``m = (p + q) / 2``; bounded by ``ln 2``.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from torchtune_longshort.loss.own_divergence import SIGNATURE, DivergenceFunctions, gradient_refusal


def _log_probs(logits_p: torch.Tensor, logits_q: torch.Tensor):
    for name, t in (("logits_a", logits_p), ("logits_b", logits_q)):
        if not t.is_floating_point():
            raise ValueError(f"{name} has dtype {t.dtype}: expected logits in a floating dtype (token ids are not "
                             "logits)")
    if logits_p.shape != logits_q.shape:
        if logits_p.shape[-1] != logits_q.shape[-1]:
            raise ValueError(
                f"vocab mismatch between windows: logits_a has vocab {logits_p.shape[-1]}, "
                f"logits_b has vocab {logits_q.shape[-1]}; both must come from the same output layer"
            )
        raise ValueError(
            f"logits_a shape {tuple(logits_p.shape)} != logits_b shape {tuple(logits_q.shape)}: "
            "compare the same target positions of both windows"
        )
    return F.log_softmax(logits_p.float(), dim=-1), F.log_softmax(logits_q.float(), dim=-1)


def sce_per_position(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """Symmetric cross-entropy ``-(<q, log p> + <p, log q>)`` per position (paper Eq. 3), float32."""
    lp, lq = _log_probs(logits_p, logits_q)
    p, q = lp.exp(), lq.exp()
    return -((q * lp).sum(-1) + (p * lq).sum(-1))


def jeffreys_per_position(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """Symmetric KL divergence ``<p - q, log p - log q>`` per position, float32."""
    lp, lq = _log_probs(logits_p, logits_q)
    return ((lp.exp() - lq.exp()) * (lp - lq)).sum(-1)


def js_per_position(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence ``(KL(p||m) + KL(q||m)) / 2``, ``m = (p+q)/2``, per position, float32."""
    lp, lq = _log_probs(logits_p, logits_q)
    # log m computed stably as logsumexp of the two log-probs minus ln 2
    lm = torch.logaddexp(lp, lq) - math.log(2.0)
    return 0.5 * ((lp.exp() * (lp - lm)).sum(-1) + (lq.exp() * (lq - lm)).sum(-1))


# name -> per-position function; also takes the dotted path of a function of one's own (``my_module.my_div``),
# imported on its first lookup in each process (:mod:`.own_divergence`)
PER_POSITION = DivergenceFunctions({
    "sce": sce_per_position,
    "jeffreys": jeffreys_per_position,
    "js": js_per_position,
})
# The shipped divergence names, the paper's first: the one list that configs, the metric, its CLI and the eval task
# take (each also takes a dotted path: :func:`is_divergence`).
DIVERGENCES = tuple(PER_POSITION)
DEFAULT_DIVERGENCE = "sce"


def divergence_fn(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Per-position divergence function for ``name``: one of ``DIVERGENCES``, or the dotted path of a function of
    one's own (imported here, refused in one line when it does not import or names no such function)."""
    try:
        return PER_POSITION[name]
    except (KeyError, TypeError):
        raise ValueError(f"divergence={name!r} is not known; choose one of {list(DIVERGENCES)}, or name {SIGNATURE} "
                         "of your own by its dotted path (my_module.my_div)") from None
    except ValueError as e:
        raise ValueError(f"divergence={name!r}: {e}") from None


# what a run that trains on a divergence (alpha > 0) asks of it beyond divergence_fn's probe: a gradient
UNTRAINABLE_FIX = ("compute it with torch operations autograd follows (no torch.no_grad, .detach(), .item(), NumPy, "
                   "or in-place change of its inputs)")


def untrainable(name: str) -> Optional[str]:
    """Why a run cannot train on divergence ``name`` (:func:`divergence_fn` takes it): its logit gradients do not
    come from autograd (:func:`~.own_divergence.gradient_refusal`); None where they do, and for the shipped ones."""
    fn = divergence_fn(name)
    if any(fn is PER_POSITION[k] for k in DIVERGENCES):
        return None
    return gradient_refusal(fn)


def check_trainable(name: str, alpha: float, prefix: str = "") -> None:
    """Refuse (``ValueError``, one line) training on divergence ``name`` at weight ``alpha`` when :func:`untrainable`
    says why; alpha 0 (reported, never differentiated) takes any. ``prefix``: the keys' path (``loss.``): the loss and
    the recipe's config check say the same words."""
    why = untrainable(name) if alpha else None
    if why:
        raise ValueError(f"{prefix}divergence={name!r} cannot be trained on ({prefix}alpha={alpha}): {why}: "
                         f"{UNTRAINABLE_FIX}, or set {prefix}alpha=0 to report it alone")


def is_divergence(name) -> bool:
    """Whether :func:`divergence_fn` takes ``name`` (a shipped name or a dotted path that imports)."""
    return isinstance(name, str) and name in PER_POSITION


def masked_mean(values: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` is true; 0 (with a gradient path) when none are."""
    if mask is None:
        if values.numel() == 0:
            return values.sum()  # 0.0, not NaN
        return values.mean()
    if mask.shape != values.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != positions shape {tuple(values.shape)}")
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def mean_divergence(
    logits_a: torch.Tensor,
    logits_b: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    divergence: str = DEFAULT_DIVERGENCE,
) -> torch.Tensor:
    """Mean divergence between two sets of next-token distributions given as logits.

    Args:
        logits_a, logits_b: ``[..., vocab]`` logits at the same target positions (any float dtype).
        mask: optional boolean ``[...]``; positions where it is False are left out of the mean.
        divergence: a name in ``DIVERGENCES``: ``"sce"`` (default, paper Eq. 3), ``"jeffreys"`` or ``"js"``, or the
            dotted path of a function of one's own (:func:`divergence_fn`).

    Returns:
        A float32 scalar: the mean over (masked) positions; 0 when there are none (never NaN).
    """
    return masked_mean(divergence_fn(divergence)(logits_a, logits_b), mask)
