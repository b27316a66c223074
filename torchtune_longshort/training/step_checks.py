"""Stop a training run at the first non-finite loss or gradient norm, before the optimizer step, so the last
checkpoint stays the last good one.

The checks read no device value of their own: a step's loss terms and gradient norms come to the host in one read
(:func:`read_step`), which the logged values need anyway, and the checks look at those numbers. On a GPU each read
waits for every kernel queued before it; one per micro-batch and one per check kept the queue from running ahead
(``benchmarks/host_syncs.py`` counts them).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Sequence, Tuple

import torch
from torch import nn

from torchtune_longshort.refusals import Refusal
from torchtune_longshort.training.learned_rope import learned_rope_modules

TERMS = ("loss", "ce", "misalignment")  # a micro-batch's loss terms, as LongShortLoss returns them
NORM_NAMES = {"grad_norm": "gradient norm", "rope_grad_norm": "RoPE gradient norm"}


def after_non_finite(ckpts) -> str:
    """What stands after a non-finite step in the run whose checkpoints are ``ckpts`` (a
    :class:`~torchtune_longshort.training.checkpointing.StepCheckpoints`), and how to go on (the message's end)."""
    last = ckpts.latest(resumable=True)
    if last is not None:
        return (f". The last checkpoint, {last}, stands: resume=True continues from it (with a lower optimizer.lr "
                "if the loss diverged)")
    return (". No checkpoint of this run to resume from: at the first steps a non-finite value comes from the "
            f"start weights (checkpointer.checkpoint_dir), the data or optimizer.lr; mend it, then {ckpts.restart()}")


def loss_terms(out) -> torch.Tensor:
    """``[loss, ce, misalignment]`` of a ``LongShortLoss`` output, detached, on its device (no read)."""
    return torch.stack([getattr(out, k).detach() for k in TERMS])


def read_step(terms: Sequence[torch.Tensor], norms: Dict[str, torch.Tensor]) -> Tuple[List[List[float]],
                                                                                       Dict[str, float]]:
    """One device read for a step: each micro-batch's :func:`loss_terms` and the gradient ``norms`` as Python
    floats (float64 on the way: exact for float32 / bfloat16 values, so each equals the tensor's ``.item()``)."""
    parts = [t.double() for t in terms] + [n.reshape(1).double() for n in norms.values()]
    values = torch.cat(parts).tolist()
    n = len(TERMS)
    rows = [values[i * n:(i + 1) * n] for i in range(len(terms))]
    return rows, dict(zip(norms, values[len(terms) * n:]))


class NonFiniteStep(Refusal, FloatingPointError):
    """A step whose loss or gradient norm is not finite: the run ends in one line (it is no bug of the program: the
    weights, the data or the learning rate), with what stands and how to go on."""


def check_finite_losses(rows: Sequence[Sequence[float]], where: Callable[[int], str], then: str = "") -> None:
    """Raise :class:`NonFiniteStep` at the first micro-batch whose loss (``rows[i]``: :data:`TERMS`) is not finite,
    naming ``where(i)`` (step, rank, e, data position); ``then``: what stands and how to go on."""
    for i, (loss, ce, misalignment) in enumerate(rows):
        if not math.isfinite(loss):
            raise NonFiniteStep(f"non-finite loss {loss} at {where(i)} (ce={ce}, misalignment={misalignment}); "
                                f"stopping before the optimizer step{then}")


def check_finite_norms(norms: Dict[str, float], where: Callable[[], str], then: str = "") -> None:
    """Raise :class:`NonFiniteStep` naming ``where()`` at the first gradient norm (in clipping order) that is not
    finite (clipping would scale every gradient to 0 or NaN and the run would go on without learning)."""
    for key, norm in norms.items():
        if not math.isfinite(norm):
            raise NonFiniteStep(f"non-finite {NORM_NAMES[key]} {norm} at {where()}; stopping before the optimizer "
                                f"step{then}")


def rope_parameters(model: nn.Module) -> List[nn.Parameter]:
    """The trainable parameters of the model's RoPE modules (CLEX's ODE), each once."""
    return [p for m in learned_rope_modules(model) for p in m.parameters(recurse=False) if p.requires_grad]


def _clip(params: Sequence[nn.Parameter], max_norm) -> torch.Tensor:
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm=float(max_norm) if max_norm is not None else float("inf"))
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return norm


def clip_gradient_norms(model: nn.Module, max_norm, rope_separately: bool = False) -> Dict[str, torch.Tensor]:
    """Clip to ``max_norm`` (None: only measure) and return ``{"grad_norm": ...}`` (the norm before clipping) plus
    ``"rope_grad_norm"`` when the model has trainable RoPE parameters (CLEX's ODE), as device tensors, unread (check
    them with :func:`read_step` and :func:`check_finite_norms` before the optimizer step). ``rope_separately``: clip
    those parameters as their own group, so that their gradient (it grows with the positions: d angle / d log freq
    is the angle) does not scale down every other gradient; ``grad_norm`` is then the rest's norm."""
    rope = rope_parameters(model)
    out: Dict[str, torch.Tensor] = {}
    if rope_separately and rope:
        ids = {id(p) for p in rope}
        out["grad_norm"] = _clip([p for p in model.parameters() if id(p) not in ids], max_norm)
        out["rope_grad_norm"] = _clip(rope, max_norm)
        return out
    if rope:  # measured (max_norm None: nothing scaled) before the joint clipping below changes it; the same
        # call as every clipping here, so sharded (FSDP2 DTensor) gradients reduce the same way
        out["rope_grad_norm"] = _clip(rope, None)
    out["grad_norm"] = _clip(list(model.parameters()), max_norm)
    return out

