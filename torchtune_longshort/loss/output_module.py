"""The model's output module as :class:`~torchtune_longshort.loss.LongShortLoss` sees it: whether it is a plain
linear layer whose weight the fused path (:mod:`torchtune_longshort.loss.fused_linear`) can project with itself,
and whether FSDP2 shards it (then the fused computation runs as the module's own forward, under its hooks).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
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
