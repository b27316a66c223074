"""Task generators for the paper's synthetic length-generalization experiments (Du et al., ICML 2025, Sec. 3,
App. B, G).

A sample is a binary sequence ``b_1 .. b_l`` (bits 0/1) wrapped as ``<BOS> b_1 .. b_l <EOS>`` and one real target:

- ``mean``:   y = (1/l) * sum_i b_i        (support [0, 1] for every l: "aligned" across lengths)
- ``length``: y = l                        (support moves with l)
- ``sum``:    y = sum_i b_i                (support [0, l] moves with l)

Two ways to draw the bits (``bits=``):

- ``"iid"`` (Sec. 3): every bit is 0 or 1 with probability 1/2;
- ``"uniform_ones"`` (App. G): the number of ones is uniform in ``{0, .., l}``, placed at uniformly random positions.

Batches are right-padded with ``PAD``; because attention is causal, the hidden state at the ``<EOS>`` position never
sees the padding, so no padding mask is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

BIT0, BIT1, BOS, EOS, PAD = 0, 1, 2, 3, 4
VOCAB_SIZE = 5
TASKS = ("mean", "length", "sum")
BIT_DISTRIBUTIONS = ("iid", "uniform_ones")


@dataclass
class Batch:
    """A padded batch.

    tokens:  ``[b, s]`` long, ``<BOS> bits <EOS> PAD..``;  s = max length + 2.
    lengths: ``[b]`` long, the number of bits ``l`` of each sequence.
    eos_pos: ``[b]`` long, index of ``<EOS>`` (= l + 1): where the model reads its prediction.
    target:  ``[b]`` float64, the raw target (before any OutRep transform).
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    eos_pos: torch.Tensor
    target: torch.Tensor


def check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"task={task!r} is unknown; accepted: {', '.join(TASKS)}")


def check_bits(bits: str) -> None:
    if bits not in BIT_DISTRIBUTIONS:
        raise ValueError(f"bits={bits!r} is unknown; accepted: {', '.join(BIT_DISTRIBUTIONS)}")


def sample_bits(lengths: torch.Tensor, bits: str, generator: torch.Generator) -> torch.Tensor:
    """Draw a ``[b, max(lengths)]`` 0/1 matrix; entries past each row's length are 0 (and ignored by callers).

    ``iid``: Bernoulli(1/2) bits. ``uniform_ones``: n_ones ~ U{0..l}, ones at a uniformly random subset of positions.
    """
    check_bits(bits)
    b = lengths.numel()
    lmax = int(lengths.max())
    valid = torch.arange(lmax).unsqueeze(0) < lengths.unsqueeze(1)
    if bits == "iid":
        x = torch.randint(0, 2, (b, lmax), generator=generator)
    else:
        # n_ones uniform in {0..l}: floor(U * (l+1)) is exact-uniform on the integers.
        n_ones = (torch.rand(b, generator=generator, dtype=torch.float64) * (lengths + 1)).floor().long()
        # a random permutation of the valid positions: rank random keys, invalid positions pushed to the end.
        keys = torch.rand(b, lmax, generator=generator)
        keys = torch.where(valid, keys, torch.full_like(keys, 2.0))
        rank = keys.argsort(dim=1).argsort(dim=1)
        x = (rank < n_ones.unsqueeze(1)).long()
    return x * valid


def make_batch(
    lengths: torch.Tensor,
    task: str,
    generator: torch.Generator,
    bits: str = "iid",
) -> Batch:
    """Build a batch for the given bit-lengths (each >= 1).

    Args:
        lengths: ``[b]`` long, number of bits per sequence.
        task: one of ``TASKS``.
        generator: torch RNG (seeded by the caller, so every run is reproducible).
        bits: one of ``BIT_DISTRIBUTIONS``.
    Returns:
        ``Batch``.
    """
    check_task(task)
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    if lengths.dim() != 1 or lengths.numel() == 0:
        raise ValueError(f"lengths must be a non-empty 1-D tensor, got shape {tuple(lengths.shape)}")
    if int(lengths.min()) < 1:
        raise ValueError(f"lengths must be >= 1, got min {int(lengths.min())}")
    x = sample_bits(lengths, bits, generator)
    b, lmax = x.shape
    tokens = torch.full((b, lmax + 2), PAD, dtype=torch.long)
    tokens[:, 0] = BOS
    pos = torch.arange(lmax).unsqueeze(0)
    valid = pos < lengths.unsqueeze(1)
    tokens[:, 1:-1] = torch.where(valid, x, torch.full_like(x, PAD))
    eos_pos = lengths + 1
    tokens[torch.arange(b), eos_pos] = EOS
    n_ones = x.sum(dim=1).double()
    if task == "mean":
        target = n_ones / lengths.double()
    elif task == "length":
        target = lengths.double()
    else:
        target = n_ones
    return Batch(tokens=tokens, lengths=lengths, eos_pos=eos_pos, target=target)


def train_lengths(n: int, l_train: int, generator: torch.Generator, l_min: int = 1) -> torch.Tensor:
    """``n`` lengths uniform in ``[l_min, l_train]`` (the paper's training distribution, default ``[1, 10]``)."""
    if l_train < l_min:
        raise ValueError(f"l_train={l_train} must be >= l_min={l_min}")
    return torch.randint(l_min, l_train + 1, (n,), generator=generator)


def eval_lengths(l_test: int, per_length: int, l_min: int = 1) -> torch.Tensor:
    """Every length in ``[l_min, l_test]``, ``per_length`` times each (the paper tests each value 1..l_test)."""
    if per_length < 1:
        raise ValueError(f"per_length={per_length} must be >= 1")
    return torch.arange(l_min, l_test + 1).repeat_interleave(per_length)
def suffix_batch(bits_row: Sequence[int], suffix_lengths: Sequence[int], task: str) -> Batch:
    """The last ``m`` bits of one sequence, for each ``m`` in ``suffix_lengths``, as a padded batch (targets
    recomputed).

    This is the scalar analogue of the paper's Eq. 4 inputs: the same sequence seen through contexts of several lengths.
    """
    check_task(task)
    L = len(bits_row)
    rows = []
    for m in suffix_lengths:
        if not 1 <= m <= L:
            raise ValueError(f"suffix length {m} must be in [1, {L}]")
        rows.append(list(bits_row[L - m :]))
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    lmax = int(lengths.max())
    tokens = torch.full((len(rows), lmax + 2), PAD, dtype=torch.long)
    tokens[:, 0] = BOS
    for i, r in enumerate(rows):
        tokens[i, 1 : 1 + len(r)] = torch.tensor(r, dtype=torch.long)
        tokens[i, 1 + len(r)] = EOS
    n1 = torch.tensor([sum(r) for r in rows], dtype=torch.float64)
    target = {"mean": n1 / lengths.double(), "length": lengths.double(), "sum": n1}[task]
    return Batch(tokens=tokens, lengths=lengths, eos_pos=lengths + 1, target=target)
