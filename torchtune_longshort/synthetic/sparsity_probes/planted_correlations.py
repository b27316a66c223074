"""k-sparse planted correlations (Golowich et al. 2025), CPU-sized.

Golowich et al. argue that a transformer length-generalizes when each predicted token depends on a small number ``k``
of earlier tokens ("k-sparse planted correlations"), and that locality of those tokens matters.

Input ``<BOS> x_1 ... x_l <SEP>``. Background tokens are uniform over ``m`` symbols; a planted set S of ``k``
positions carries tokens from a separate alphabet of ``q`` values, and the label read at ``<SEP>`` is the sum of the
planted values mod ``q``. The distribution of the planted tokens and of the label does not depend on ``l``: only the
amount of background does. ``window = 0`` spreads S uniformly over the sequence; ``window = w`` first places a window
of ``w`` consecutive positions uniformly, then S uniformly inside it (the theory's locality condition: the span of S
is bounded independently of ``l``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Dict

import torch
import torch.nn as nn

from ..models import SyntheticTransformer
from .probe_training import ProbeSettings, accuracy, fit

P_BOS, P_SEP, P_PAD = 0, 1, 2
N_SPECIAL = 3  # background tokens start after the three special ones, planted ones after those


def planted_vocab_size(m: int, q: int) -> int:
    return N_SPECIAL + m + q


def make_planted_batch(lengths: torch.Tensor, k: int, q: int, m: int, window: int, generator: torch.Generator):
    """k-sparse planted-correlation batch (see module doc).

    Args:
        lengths: ``[b]`` sequence lengths ``l >= k``.  k: planted tokens per sequence.  q: planted alphabet (label
        classes).  m: background alphabet.  window: 0 = S anywhere, else S inside ``window`` consecutive positions.
    Returns:
        ``tokens [b, max(l)+2]`` (right-padded with P_PAD), ``sep_pos [b]`` (= l+1), ``target [b]`` long in
        ``[0, q)``, ``planted [b, max(l)]`` bool (S), ``values [b, max(l)]`` long (planted value, -1 elsewhere).
    """
    lengths = torch.as_tensor(lengths)
    if k < 1 or q < 2 or m < 1:
        raise ValueError(f"need k >= 1, q >= 2, m >= 1; got k={k}, q={q}, m={m}")
    if window and window < k:
        raise ValueError(f"window={window} cannot hold k={k} planted positions")
    if bool((lengths < k).any()):
        raise ValueError(f"every length must be >= k={k}; got {lengths.min().item()}")
    b, L = lengths.numel(), int(lengths.max())
    pos = torch.arange(L).unsqueeze(0)
    valid = pos < lengths.unsqueeze(1)
    if window:
        w = torch.clamp(lengths, max=window)
        start = (torch.rand(b, generator=generator) * (lengths - w + 1).double()).long()
        allowed = (pos >= start.unsqueeze(1)) & (pos < (start + w).unsqueeze(1))
    else:
        allowed = valid
    keys = torch.where(allowed, torch.rand(b, L, generator=generator), torch.full((b, L), 2.0))
    planted = keys.argsort(1).argsort(1) < k
    vals = torch.randint(0, q, (b, L), generator=generator)
    background = torch.randint(0, m, (b, L), generator=generator)
    body = torch.where(planted, N_SPECIAL + m + vals, N_SPECIAL + background)
    tokens = torch.full((b, L + 2), P_PAD, dtype=torch.long)
    tokens[:, 0] = P_BOS
    tokens[:, 1:-1] = torch.where(valid, body, torch.full_like(body, P_PAD))
    sep_pos = lengths + 1
    tokens[torch.arange(b), sep_pos] = P_SEP
    values = torch.where(planted, vals, torch.full_like(vals, -1))
    target = (vals * planted).sum(1) % q
    return tokens, sep_pos, target.long(), planted, values


@dataclass
class PlantedConfig(ProbeSettings):
    """One planted-correlation run: fixed ``k``, training lengths ``l ~ U{k..l_train}``, test every ``l`` in
    ``test_ls``."""

    k: int = 2
    q: int = 4
    m: int = 8
    window: int = 0
    l_train: int = 10
    pe: str = "rope"
    test_ls: tuple = (5, 10, 20, 40, 80)

    def validate(self) -> None:
        if self.k < 1 or self.k > self.l_train:
            raise ValueError(f"k={self.k} must be in [1, l_train={self.l_train}]")
        if self.window and not self.k <= self.window:
            raise ValueError(f"window={self.window} must be 0 (spread) or >= k={self.k}")
        if min(self.test_ls) < self.k:
            raise ValueError(f"test length {min(self.test_ls)} is shorter than k={self.k}")


def train_planted(cfg: PlantedConfig) -> Dict:
    """Cross-entropy at ``<SEP>``; returns config, final train loss, test accuracy per ``"k,l"``."""
    cfg.validate()
    t0 = time.time()
    g = cfg.train_generator()
    max_len = max(cfg.test_ls) + 2
    model = SyntheticTransformer(pe=cfg.pe, dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                                 max_len=max_len, vocab_size=planted_vocab_size(cfg.m, cfg.q), out_dim=cfg.q)

    def step_loss() -> torch.Tensor:
        ls = torch.randint(cfg.k, cfg.l_train + 1, (cfg.batch_size,), generator=g)
        tok, sep, y, _, _ = make_planted_batch(ls, cfg.k, cfg.q, cfg.m, cfg.window, g)
        return nn.functional.cross_entropy(model(tok, sep), y)

    final_loss = fit(model, cfg.lr, cfg.max_steps, step_loss)
    return {"config": asdict(cfg), "final_train_loss": final_loss, "acc": score_planted(model, cfg),
            "seconds": time.time() - t0}


@torch.no_grad()
def score_planted(model: nn.Module, cfg: PlantedConfig) -> Dict[str, float]:
    """Test accuracy of ``model`` (tokens, read positions -> q logits) per ``"k,l"``: ``cfg.test_n`` fresh inputs
    for every l in ``test_ls``, the same inputs for every run of one seed."""
    acc = {}
    gt = cfg.test_generator()
    model.eval()
    for l in cfg.test_ls:
        tok, sep, y, _, _ = make_planted_batch(torch.full((cfg.test_n,), l), cfg.k, cfg.q, cfg.m, cfg.window, gt)
        acc[f"{cfg.k},{l}"] = accuracy(model(tok, sep).argmax(-1), y)
    return acc
