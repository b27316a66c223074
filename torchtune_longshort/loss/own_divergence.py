"""A divergence of one's own, named by its dotted path (``loss.divergence: my_module.my_div``), as a RoPE method
or a model family is (:mod:`torchtune_longshort.rope.registry`: imported on first lookup in each process).

The function takes two logit tensors ``[..., vocab]`` (window A's, the longer context, first; in the metric the
``l1`` suffix's) and returns one float32 value per position (``[...]``), as
the shipped ``*_per_position`` functions of :mod:`.divergences` do; it must depend on the logits through their
softmaxes only (a divergence between two distributions), since the fused loss hands it log-probabilities.

On the fused loss path (:mod:`.fused_linear`) a shipped divergence has a hand-written logit gradient
(:mod:`.pair_gradients`); one of one's own gets its block's values and logit gradients from autograd on that
block (:func:`autograd_block`): the same ``[b, n, V]`` blocks, so memory grows with the block, not the chunk,
but autograd keeps the function's ``[b, n, V]`` intermediates, a few more than the hand-written gradient's one.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from torchtune_longshort.rope.registry import DottedRegistry

PerPosition = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

SIGNATURE = "a function (logits_p, logits_q) -> per-position values ([..., vocab] logits in, [...] float32 out)"
# where a divergence of one's own is imported: each process that computes it
USED_IN = "every process that computes the loss or the misalignment metric"


class DivergenceFunctions(DottedRegistry):
    """``name -> per-position function``; a dotted path names a module-level function of one's own, imported,
    asked once on a small input (its output's shape and dtype) and kept under that path."""

    def __init__(self, entries: dict):
        super().__init__(entries, base=None, what="divergence", used_in=USED_IN)

    def accepts(self, entry: Any) -> bool:
        return callable(entry) and not isinstance(entry, type)

    def wanted(self) -> str:
        return SIGNATURE

    def check(self, fn: Any, path: str) -> None:
        """Asked on a small input before it is kept: refused (``ValueError``, one line) where it raises, gives
        another shape or dtype than one float32 value a position, or moves under a shift of the logits."""
        probe = torch.linspace(-1.0, 1.0, 2 * 3 * 5).view(2, 3, 5)
        try:
            out = fn(probe, probe.flip(-1))
            bad = None if (isinstance(out, torch.Tensor) and out.shape == (2, 3) and out.dtype == torch.float32) \
                else f"gave {_described(out)}"
        except Exception as e:  # noqa: BLE001 - the user's function: any failure is its refusal
            bad = f"raised {type(e).__name__}: {e}"
        if bad is not None:
            raise ValueError(f"{path!r} on two [2, 3, 5] float32 logit tensors {bad}: a divergence of your own is "
                             f"{SIGNATURE}, a float32 tensor of shape [2, 3] here")
        moved = _moved_by_a_shift(fn, probe, out)
        if moved is not None:
            raise ValueError(f"{path!r} depends on the logits other than through their softmaxes: on two [2, 3, 5] "
                             f"float32 logit tensors, adding a constant to each position's logits (which leaves its "
                             f"softmax as it is) moved its value by {moved:.3g}; the fused loss path hands a "
                             "divergence log-probabilities, so it would train on another function than the one "
                             "named: compute it from the softmaxes (log_softmax of each input, as the shipped ones "
                             "do)")


def _moved_by_a_shift(fn: PerPosition, probe: torch.Tensor, out: torch.Tensor) -> Optional[float]:
    """How far ``fn``'s values ``out`` on ``(probe, probe.flip(-1))`` move when each position's logits are shifted
    by a constant (softmax-invariant); None within rounding (5% of the values' scale: a function of the softmaxes
    computed in bfloat16 moves by 7e-3 here, a logit MSE by 16), or where the shifted call fails (the training call
    names that)."""
    shift = torch.tensor([[1.0, -1.5, 2.0], [-0.5, 1.5, 0.25]]).unsqueeze(-1)
    try:
        shifted = fn(probe + shift, probe.flip(-1) - shift)
        if not (isinstance(shifted, torch.Tensor) and shifted.shape == out.shape):
            return None
        moved = float((shifted.float() - out.float()).abs().max().detach())  # no autograd warning on screen
    except Exception:  # noqa: BLE001 - the first call succeeded: left to the run
        return None
    return moved if moved > 0.05 * (1.0 + float(out.detach().float().abs().max())) else None


def gradient_refusal(fn: PerPosition) -> Optional[str]:
    """Why autograd cannot give ``fn``'s logit gradients, which a run that trains on it (``alpha > 0``) takes from
    autograd (the fused path on each block's log-probabilities, leaves that require grad: :func:`autograd_block`;
    the checkpointed one through the logits): asked on two small such leaves; None where it can. A function computed
    under ``torch.no_grad``, detached, in NumPy or changing its inputs in place passed the import probe (no gradient
    asked) and failed the run's first step in a traceback, or, on the checkpointed path, trained on the CE alone; so
    did one whose values require grad but reach neither input (made anew from a NumPy result)."""
    za = torch.linspace(-1.0, 1.0, 2 * 3 * 5).view(2, 3, 5).requires_grad_()
    zb = za.detach().flip(-1).requires_grad_()
    try:
        with torch.enable_grad():
            values = fn(za, zb)
            if not (isinstance(values, torch.Tensor) and values.requires_grad):
                return ("on two [2, 3, 5] float32 logit tensors that require grad its values carry no gradient "
                        "(computed under torch.no_grad, detached, or outside torch)")
            grads = torch.autograd.grad(values.sum(), (za, zb), allow_unused=True)
    except Exception as e:  # noqa: BLE001 - the user's function: any failure is its refusal
        return (f"on two [2, 3, 5] float32 logit tensors that require grad, asking autograd for its gradient raised "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if all(g is None for g in grads):  # a tensor made anew (torch.tensor(..., requires_grad=True) of NumPy's result)
        return ("on two [2, 3, 5] float32 logit tensors that require grad its values require grad but do not come "
                "from them (a tensor made anew, e.g. torch.tensor(..., requires_grad=True) of a NumPy result): "
                "autograd gives neither a gradient")
    return None


def _described(out: Any) -> str:
    if isinstance(out, torch.Tensor):
        return f"a {out.dtype} tensor of shape {list(out.shape)}"
    return f"a {type(out).__name__}"


def autograd_block(fn: PerPosition):
    """A :mod:`.pair_gradients` block function for ``fn``: the values (``VALUE_AFFINE`` ``(1, 0)``) and, where
    wanted, ``w`` times ``fn``'s logit gradients plus the CE's ``rw * p``, written over ``lpa`` / ``lpb``. ``fn``
    is called on the log-probabilities: a function of the softmaxes has the same value and logit gradient there
    (softmax's Jacobian depends on the probabilities alone)."""

    def block(lpa, lpb, pa, pb, out_v, tmp, want_a, want_b, w, rw_a, rw_b):
        del tmp  # autograd allocates its own intermediates
        with torch.enable_grad():
            za = lpa.detach().requires_grad_(want_a)
            zb = lpb.detach().requires_grad_(want_b)
            values = fn(za, zb)
            out_v.copy_(values.detach().unsqueeze(-1))
            wanted = [z for z, want in ((za, want_a), (zb, want_b)) if want]
            grads = list(torch.autograd.grad(values.sum(), wanted, allow_unused=True)) if wanted else []
            del values
        for want, lp, p, rw in ((want_a, lpa, pa, rw_a), (want_b, lpb, pb, rw_b)):
            if want:
                g = grads.pop(0)
                (lp.zero_() if g is None else torch.mul(g, w, out=lp)).addcmul_(p, rw)
        return want_a, want_b

    return block
