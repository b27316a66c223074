"""Sparse parity, the sparsity probe of length generalization (Golowich et al. 2025), CPU-sized.

Input ``<BOS> J_1 t_1 ... J_l t_l <SEP>``: ``l`` pairs of an index token ``J_i`` in ``{1..N}`` (N = 20) and a bit
``t_i``. Exactly ``k`` of the ``J_i`` are ``<= N/2`` ("selected"); the target, read at ``<SEP>``, is the parity (XOR)
of the bits of the selected pairs. ``k`` is the task's sparsity: the answer depends on ``k`` tokens however long the
input is. Golowich et al. predict that a transformer trained on short inputs generalizes to much longer ones when
``k`` is small, and fails for ``k_test > K_train``.

Position ids (RoPE and learned models only): the schemes of ``positions``; here ``"couple"`` gives ``J_i`` and
``t_i`` the id ``i`` (BOS 0, SEP l+1), so the id counts pairs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Dict, Optional

import torch
import torch.nn as nn

from ..models import SyntheticTransformer
from .positions import PES_WITH_POSITION_IDS, check_position_scheme, pose_ids
from .probe_training import ProbeSettings, accuracy, fit

BIT0, BIT1, BOS, SEP, PAD = 0, 1, 2, 3, 4


def index_token(j: torch.Tensor) -> torch.Tensor:
    """Token id of index ``j`` (1-based)."""
    return j + PAD


def vocab_size(N: int) -> int:
    return PAD + N + 1


def make_parity_batch(lengths: torch.Tensor, ks: torch.Tensor, N: int, generator: torch.Generator):
    """Sparse-parity batch.

    Args:
        lengths: ``[b]`` number of pairs ``l`` per sample.  ks: ``[b]`` sparsity ``k`` (1 <= k <= l).  N: even index
        range.  generator: RNG.
    Returns:
        ``tokens [b, 2*max(l)+2]`` (right-padded), ``sep_pos [b]`` (= 2l+1), ``target [b]`` long (0/1),
        ``selected [b, max(l)]`` bool (which pairs are selected; for tests).
    """
    if N < 2 or N % 2:
        raise ValueError(f"N={N} must be an even number >= 2")
    lengths, ks = torch.as_tensor(lengths), torch.as_tensor(ks)
    if bool((ks < 1).any()) or bool((ks > lengths).any()):
        raise ValueError(f"every k must be in [1, l]; got k={ks.tolist()[:8]} for l={lengths.tolist()[:8]}")
    b, L = lengths.numel(), int(lengths.max())
    valid = torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)
    # k selected pairs among the l valid ones: the k smallest random keys
    keys = torch.where(valid, torch.rand(b, L, generator=generator), torch.full((b, L), 2.0))
    rank = keys.argsort(1).argsort(1)
    selected = rank < ks.unsqueeze(1)
    half = N // 2
    j_sel = torch.randint(1, half + 1, (b, L), generator=generator)
    j_oth = torch.randint(half + 1, N + 1, (b, L), generator=generator)
    J = torch.where(selected, j_sel, j_oth)
    t = torch.randint(0, 2, (b, L), generator=generator)
    tokens = torch.full((b, 2 * L + 2), PAD, dtype=torch.long)
    tokens[:, 0] = BOS
    pairs = torch.stack([index_token(J), t], 2).reshape(b, 2 * L)
    tokens[:, 1:-1] = torch.where(valid.repeat_interleave(2, 1), pairs, torch.full_like(pairs, PAD))
    sep_pos = 2 * lengths + 1
    tokens[torch.arange(b), sep_pos] = SEP
    target = ((t * selected).sum(1) % 2).long()
    return tokens, sep_pos, target, selected


def position_ids(lengths: torch.Tensor, s: int, scheme: str, max_pos: int, generator: Optional[torch.Generator]):
    """``[b, s]`` position ids for a right-padded batch under ``scheme`` (see module doc); ``max_pos`` bounds them."""
    check_position_scheme(scheme)
    b = lengths.numel()
    base = torch.arange(s).expand(b, s).clone()
    if scheme == "couple":
        # BOS 0, pair i (tokens 2i-1, 2i) -> i, SEP -> l+1; padding continues counting (never attended by SEP)
        return (base + 1) // 2
    if scheme == "pose" and generator is not None:
        return pose_ids(2 * lengths + 2, s, max_pos, generator)
    return base


@dataclass
class ParityConfig(ProbeSettings):
    """One sparse-parity run. Training: k ~ U{1..k_train}, then l ~ U{k..l_train} pairs; test: every l in
    ``test_ls`` and k in ``test_ks``."""

    N: int = 20
    l_train: int = 10
    k_train: int = 2
    pe: str = "rope"
    positions: str = "plain"
    test_ls: tuple = (5, 10, 20, 30, 40)
    test_ks: tuple = (1, 2, 3)

    def validate(self) -> None:
        check_position_scheme(self.positions, self.pe)
        if self.k_train < 1 or self.k_train > self.l_train:
            raise ValueError(f"k_train={self.k_train} must be in [1, l_train={self.l_train}]")
        if max(self.test_ks) > min(self.test_ls):
            raise ValueError(f"test_ks max {max(self.test_ks)} exceeds the shortest test length {min(self.test_ls)}")


def _max_len(cfg: ParityConfig) -> int:
    """Position-table size: the longest test input, ``2l + 2`` tokens."""
    return 2 * max(cfg.test_ls) + 2


def _model_ids(cfg: ParityConfig, lengths: torch.Tensor, s: int, max_len: int, generator: Optional[torch.Generator]):
    """The ids ``cfg``'s model reads (None for encodings without ids); ``generator`` None gives test-time ids."""
    if cfg.pe not in PES_WITH_POSITION_IDS:
        return None
    return position_ids(lengths, s, cfg.positions, max_len, generator)


def train_parity(cfg: ParityConfig) -> Dict:
    """Train with cross-entropy at ``<SEP>``; returns config, final train loss, and test accuracy per ``"k,l"``."""
    cfg.validate()
    t0 = time.time()
    g = cfg.train_generator()
    max_len = _max_len(cfg)
    model = SyntheticTransformer(pe=cfg.pe, dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                                 max_len=max_len, vocab_size=vocab_size(cfg.N), out_dim=2)

    def step_loss() -> torch.Tensor:
        ks = torch.randint(1, cfg.k_train + 1, (cfg.batch_size,), generator=g)
        # l ~ U{k..l_train} given k
        ls = ks + (torch.rand(cfg.batch_size, generator=g) * (cfg.l_train - ks + 1).double()).long()
        tok, sep, y, _ = make_parity_batch(ls, ks, cfg.N, g)
        return nn.functional.cross_entropy(model(tok, sep, _model_ids(cfg, ls, tok.shape[1], max_len, g)), y)

    final_loss = fit(model, cfg.lr, cfg.max_steps, step_loss)
    return {"config": asdict(cfg), "final_train_loss": final_loss, "acc": score_parity(model, cfg),
            "seconds": time.time() - t0}


@torch.no_grad()
def score_parity(model: nn.Module, cfg: ParityConfig) -> Dict[str, float]:
    """Test accuracy of ``model`` (tokens, read positions, ids -> 2 logits) per ``"k,l"``: ``cfg.test_n`` fresh
    inputs for every k in ``test_ks`` and l in ``test_ls``, the same inputs for every run of one seed."""
    max_len = _max_len(cfg)
    acc = {}
    gt = cfg.test_generator()
    model.eval()
    for k in cfg.test_ks:
        for l in cfg.test_ls:
            ls = torch.full((cfg.test_n,), l)
            tok, sep, y, _ = make_parity_batch(ls, torch.full((cfg.test_n,), k), cfg.N, gt)
            pos = _model_ids(cfg, ls, tok.shape[1], max_len, None)
            acc[f"{k},{l}"] = accuracy(model(tok, sep, pos).argmax(-1), y)
    return acc
