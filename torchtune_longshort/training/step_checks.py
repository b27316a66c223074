"""Stop a training run at the first non-finite loss or gradient norm, before the optimizer step, so the last
checkpoint stays the last good one."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


def check_finite_loss(out, where: Callable[[], str]) -> None:
    """Raise ``FloatingPointError`` naming ``where()`` (step, rank, e, data position) when ``out.loss`` is not
    finite."""
    if not torch.isfinite(out.loss.detach()).item():
        raise FloatingPointError(
            f"non-finite loss {out.loss.item()} at {where()} (ce={out.ce.item()}, "
            f"misalignment={out.misalignment.item()}); stopping before the optimizer step"
        )


def clip_gradients(model: nn.Module, max_norm, where: Callable[[], str]) -> torch.Tensor:
    """Clip to ``max_norm`` (None: only measure the norm) and return the total gradient norm; raise
    ``FloatingPointError`` naming ``where`` when it is not finite (clipping would scale every gradient to 0 or NaN
    and the run would go on without learning)."""
    grad_norm = torch.nn.utils.clip_grad_norm_(
        model.parameters(), max_norm=float(max_norm) if max_norm is not None else float("inf")
    )
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    if not torch.isfinite(grad_norm).item():
        raise FloatingPointError(
            f"non-finite gradient norm {grad_norm.item()} at {where()}; stopping before the optimizer step"
        )
    return grad_norm
