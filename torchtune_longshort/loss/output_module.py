"""The model's output module as :class:`~torchtune_longshort.loss.LongShortLoss` sees it: whether it is a plain
linear layer whose weight the fused path (:mod:`torchtune_longshort.loss.fused_linear`) can project with itself,
and whether FSDP2 shards it (then the fused computation runs as the module's own forward, under its hooks). A
weight that FSDP2 holds sharded outside such a module (a tied output's: the token embedding's, owned by the root
unit and resharded after the model's forward) is gathered whole for the loss by :func:`gathered`.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


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


class _AverageGrad(torch.autograd.Function):
    """Identity forward; backward divides the gradient by ``n`` (the ranks the following reduction sums over)."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.n = n
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad / ctx.n, None


def gathered(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``t`` whole: a DTensor is all-gathered, anything else returned as is.

    The gathered tensor's gradient goes back as FSDP2 reduces its own: summed over the mesh's ranks, divided by
    their number (FSDP2 averages), and reduce-scattered to ``t``'s placements, where autograd accumulates it into
    the sharded parameter's ``.grad``. FSDP2 adds the gradient of the parameter's other use (the embedding lookup)
    to that ``.grad`` in its post-backward. On a mesh whose ranks see the same data the average is the gradient
    itself.
    """
    if t is None or not is_dtensor(t):
        return t
    from torch.distributed.tensor import Partial

    mesh = t.device_mesh
    whole = t.full_tensor(grad_placements=[Partial("sum")] * mesh.ndim)
    return _AverageGrad.apply(whole, mesh.size()) if t.requires_grad else whole


def callable_output(module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The output module as a caller outside FSDP2's hooks may call it: as is, or, for a plain linear output whose
    weight FSDP2 holds sharded outside the module's own unit (a tied embedding's, resharded after the root's
    forward), a linear over the gathered weight (:func:`gathered`; a collective, so every rank calls this alike).
    The loss's checkpointed path and the recipe's validation ask this."""
    found = plain_linear_weight(module)
    if found is None or is_fsdp_module(module) or not any(is_dtensor(t) for t in found):
        return module
    weight, bias = (gathered(t) for t in found)
    return lambda x: F.linear(x, weight, bias)
