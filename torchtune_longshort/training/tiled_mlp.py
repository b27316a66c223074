"""The recipe's ``tiled_mlp_tokens``: each decoder layer's MLP runs over tiles of that many token rows, and each tile
is recomputed in the backward pass, one tile at a time (a sequence-tiled MLP, as in Arctic Long Sequence Training's
TiledMLP).

Why: with every layer checkpointed (and its input offloaded), a long window's step peaks in the backward of one
layer, where the layer's recomputed activations and their gradients are alive at once. The MLP's are the largest of
them: its gate and up projections, their product and the gradients of each are ``[tokens, hidden]`` with hidden
3.5x the model width (14336 at the Llama-3.1-8B width, 4096). Tiled, they are ``[tile, hidden]``; what stays whole is
the MLP's input and output, ``[tokens, dim]``.

How: the MLP is position-wise (each token's output depends on that token's input alone), so splitting its input's
rows (batch and sequence flattened) and concatenating the outputs computes the same function. Each tile runs under
``torch.utils.checkpoint`` (non-reentrant): the forward keeps only the tile's input (a view of the MLP's input), and
the backward recomputes the tile when it reaches it. The autograd engine runs the later tile's nodes first (they were
created later), so one tile's recomputed activations are alive at a time. Nested inside the layer's own
checkpoint, the layer's recomputation runs the tiles under their checkpoints again, and the tiles are recomputed a
second time in its backward: the MLP's forward runs three times a step instead of two (about 1/6 more of the layer's
FLOPs at the 8B shape). Without the layer's checkpoint it is a selective checkpoint of the MLP alone. Without
gradients (validation) the tiles run plainly, one after the other, which bounds the forward's transient too.

Which MLPs: torchtune's position-wise ``FeedForward`` (every RoPE family torchtune builds, LoRA and QLoRA linears
included). Any other module under ``layer.mlp`` (a mixture of experts, whose routing may see the whole batch) runs
untiled, and the run says so in one line. The parameters, their names and the state dict are unchanged: only the
module's ``forward`` is replaced on the instance.
"""

from __future__ import annotations

import types
from typing import Callable, List

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torchtune.modules import FeedForward

from torchtune_longshort.plural import counted
from torchtune_longshort.training.module_names import clean_module_name

TILED = (FeedForward,)  # position-wise MLP modules; any other ``mlp`` runs untiled
ATTRIBUTE = "_longshort_tile_tokens"


def _tiled_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``type(self).forward`` over tiles of ``self._longshort_tile_tokens`` rows of ``x`` (``[..., dim]``), each
    tile checkpointed when gradients are on (module doc)."""
    plain = type(self).forward
    rows = getattr(self, ATTRIBUTE)
    if x.dim() < 2 or x.numel() // x.shape[-1] <= rows:
        return plain(self, x)
    tiles = x.reshape(-1, x.shape[-1]).split(rows)
    if torch.is_grad_enabled():
        outs = [checkpoint(plain, self, t, use_reentrant=False) for t in tiles]
    else:
        outs = [plain(self, t) for t in tiles]
    out = torch.cat(outs)
    return out.view(*x.shape[:-1], out.shape[-1])


def tile_mlps(model: nn.Module, tile_tokens: int | None, note: Callable[[str], None]) -> List[str]:
    """Make every decoder layer's MLP in ``model`` run over tiles of ``tile_tokens`` rows (None: leave the model as
    it is). Returns the names of the tiled MLPs; ``note`` gets one line saying how many, and one naming the MLP
    types that stay untiled."""
    if tile_tokens is None:
        return []
    if isinstance(tile_tokens, bool) or not isinstance(tile_tokens, int) or tile_tokens < 1:
        raise ValueError(f"tiled_mlp_tokens={tile_tokens!r}: expected a positive integer (token rows a tile), or null")
    tiled, untiled = [], {}
    for name, module in model.named_modules():
        mlp = module._modules.get("mlp")  # not getattr: a checkpoint wrapper forwards it to the layer it wraps
        if mlp is None:
            continue
        if isinstance(mlp, TILED):
            setattr(mlp, ATTRIBUTE, tile_tokens)
            mlp.forward = types.MethodType(_tiled_forward, mlp)
            tiled.append(clean_module_name(f"{name}.mlp"))
        else:
            untiled.setdefault(type(mlp).__name__, []).append(clean_module_name(f"{name}.mlp"))
    note(f"tiled MLP: {len(tiled)} decoder layers' MLPs run over tiles of {tile_tokens} token rows, each recomputed "
         "in the backward pass")
    for kind, names in untiled.items():
        note(f"tiled MLP: {counted(len(names), 'MLP')} of type {kind} run{'s' if len(names) == 1 else ''} untiled "
             f"(not a position-wise torchtune FeedForward; first: {names[0]})")
    return tiled

