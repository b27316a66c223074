"""Stop a training run at the first non-finite loss or gradient norm, before the optimizer step, so the last
checkpoint stays the last good one."""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import torch
from torch import nn

from torchtune_longshort.training.learned_rope import learned_rope_modules


def check_finite_loss(out, where: Callable[[], str]) -> None:
    """Raise ``FloatingPointError`` naming ``where()`` (step, rank, e, data position) when ``out.loss`` is not
    finite."""
    if not torch.isfinite(out.loss.detach()).item():
        raise FloatingPointError(
            f"non-finite loss {out.loss.item()} at {where()} (ce={out.ce.item()}, "
            f"misalignment={out.misalignment.item()}); stopping before the optimizer step"
        )


def rope_parameters(model: nn.Module) -> List[nn.Parameter]:
    """The trainable parameters of the model's RoPE modules (CLEX's ODE), each once."""
    return [p for m in learned_rope_modules(model) for p in m.parameters(recurse=False) if p.requires_grad]


def _clip(params: Sequence[nn.Parameter], max_norm, name: str, where: Callable[[], str]) -> torch.Tensor:
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm=float(max_norm) if max_norm is not None else float("inf"))
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    if not torch.isfinite(norm).item():
        raise FloatingPointError(f"non-finite {name} {norm.item()} at {where()}; stopping before the optimizer step")
    return norm


def clip_gradients(model: nn.Module, max_norm, where: Callable[[], str],
                   rope_separately: bool = False) -> Dict[str, torch.Tensor]:
    """Clip to ``max_norm`` (None: only measure) and return ``{"grad_norm": ...}`` (the norm before clipping) plus
    ``"rope_grad_norm"`` when the model has trainable RoPE parameters (CLEX's ODE). ``rope_separately``: clip those
    parameters as their own group, so that their gradient (it grows with the positions: d angle / d log freq is the
    angle) does not scale down every other gradient; ``grad_norm`` is then the rest's norm. Raise
    ``FloatingPointError`` naming ``where`` when a norm is not finite (clipping would scale every gradient to 0 or
    NaN and the run would go on without learning)."""
    rope = rope_parameters(model)
    out: Dict[str, torch.Tensor] = {}
    if rope_separately and rope:
        ids = {id(p) for p in rope}
        out["grad_norm"] = _clip([p for p in model.parameters() if id(p) not in ids], max_norm, "gradient norm", where)
        out["rope_grad_norm"] = _clip(rope, max_norm, "RoPE gradient norm", where)
        return out
    if rope:  # measured (max_norm None: nothing scaled) before the joint clipping below changes it; the same
        # call as every clipping here, so sharded (FSDP2 DTensor) gradients reduce the same way
        out["rope_grad_norm"] = _clip(rope, None, "RoPE gradient norm", where)
    out["grad_norm"] = _clip(list(model.parameters()), max_norm, "gradient norm", where)
    return out
