"""What the sparsity probes share in training: model size, budget, test size and seeds (``ProbeSettings``), and the
training loop (``fit``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn as nn

# test batches come from their own stream, far from any training seed
_TEST_SEED_OFFSET = 30_000


@dataclass
class ProbeSettings:
    """Model size, training budget, test size and seed shared by the beyond-the-paper probes."""

    dim: int = 64
    num_layers: int = 2
    num_heads: int = 4
    batch_size: int = 128
    lr: float = 1e-3
    max_steps: int = 1500
    test_n: int = 256
    seed: int = 0

    def train_generator(self) -> torch.Generator:
        """Seeds torch's global RNG (model init) and returns the generator of the training batches."""
        torch.manual_seed(self.seed)
        return torch.Generator().manual_seed(self.seed)

    def test_generator(self) -> torch.Generator:
        """The generator of the test batches: the same test inputs for every run of one seed."""
        return torch.Generator().manual_seed(_TEST_SEED_OFFSET + self.seed)


def fit(model: nn.Module, lr: float, max_steps: int, step_loss: Callable[[], torch.Tensor]) -> float:
    """The beyond-the-paper training loop: AdamW (no weight decay), cosine lr from ``lr`` to 0 over ``max_steps``,
    ``step_loss()`` draws a fresh batch and returns its loss. Returns the mean loss of the last 50 steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in range(max_steps):
        for grp in opt.param_groups:
            grp["lr"] = 0.5 * lr * (1 + np.cos(np.pi * step / max_steps))
        model.train()
        loss = step_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return float(np.mean(losses[-50:]))


def accuracy(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Fraction of ``pred`` equal to ``target`` (same shape)."""
    return float((pred == target).double().mean())
