"""The tiles ``tiled_mlp_tokens`` cuts, counted by the MLP's own forward (a torchtune ``FeedForward`` subclass that
records the rows of each call): ``n`` rows in tiles of ``t`` are ``n // t`` tiles of ``t`` and one of ``n % t``
(``torch.split``'s rule, written out), each recomputed once in the backward pass; no more than ``t`` rows run as one
plain call, recomputed never. Equal outputs (tests/test_tiled_mlp.py) let a split of ``t + 1`` rows and a
checkpointed single tile through; so did a bool tile size and the plural of the untiled-MLP line."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchtune.modules import FeedForward

from torchtune_longshort.training.tiled_mlp import tile_mlps

DIM, HIDDEN = 8, 24


class _Counted(FeedForward):
    def __init__(self):
        super().__init__(gate_proj=nn.Linear(DIM, HIDDEN), down_proj=nn.Linear(HIDDEN, DIM),
                         up_proj=nn.Linear(DIM, HIDDEN))
        self.rows = []

    def forward(self, x):
        self.rows.append(x.numel() // x.shape[-1])
        return super().forward(x)


class _Layer(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp


def _tiled(tile):
    torch.manual_seed(0)
    model = nn.ModuleDict({"layer": _Layer(_Counted())})
    assert tile_mlps(model, tile, lambda line: None) == ["layer.mlp"]
    return model["layer"].mlp


def _split_rule(n, t):
    return [t] * (n // t) + ([n % t] if n % t else [])


@pytest.mark.parametrize("batch,seq,tile", [(2, 48, 40), (1, 7, 3), (3, 5, 5)])
def test_tiles_are_torch_splits_rows_recomputed_once(batch, seq, tile):
    mlp = _tiled(tile)
    x = torch.randn(batch, seq, DIM, requires_grad=True)
    with torch.no_grad():
        mlp(x)
    assert mlp.rows == _split_rule(batch * seq, tile)
    mlp.rows.clear()
    mlp(x).sum().backward()
    tiles = _split_rule(batch * seq, tile)
    assert mlp.rows == tiles + tiles[::-1]  # the backward recomputes the later tile first


@pytest.mark.parametrize("rows", [1, 6])
def test_rows_within_one_tile_run_plainly_without_recomputation(rows):
    mlp = _tiled(6)
    mlp(torch.randn(1, rows, DIM, requires_grad=True)).sum().backward()
    assert mlp.rows == [rows]


def test_a_bool_tile_size_is_refused_and_two_untiled_mlps_are_plural():
    with pytest.raises(ValueError, match="tiled_mlp_tokens=True: expected a positive integer"):
        tile_mlps(_Layer(_Counted()), True, lambda line: None)
    model = nn.ModuleDict({"a": _Layer(nn.Identity()), "b": _Layer(nn.Identity())})
    notes = []
    assert tile_mlps(model, 4, notes.append) == []
    assert notes[1] == "tiled MLP: 2 MLPs of type Identity run untiled (not a position-wise torchtune FeedForward; " \
                       "first: a.mlp)"
