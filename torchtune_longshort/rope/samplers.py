"""Position-id samplers for training: they choose *which* positions a short training window occupies, and
compose with any frequency method (pass the result as ``input_pos`` to a torchtune decoder).

- ``random_pos`` (Ruoss et al. 2023, "Randomized positional encodings boost length generalization of
  transformers"): the positions of a length-``s`` window are a sorted, uniformly random subset of
  ``{0, ..., max_position - 1}``, drawn without replacement, per sequence.
- ``pose`` (Zhu et al. 2024, "PoSE: Efficient context window extension of LLMs via positional skip-wise
  training"): the window is cut into ``num_chunks`` contiguous chunks at random points; chunk i keeps
  consecutive positions but is moved right by a skip ``u_i``, with ``0 = u_0 <= u_1 <= ... <= u_{N-1} <=
  target_len - s`` drawn uniformly, so every position is below ``target_len``.

Both return a LongTensor [batch_size, seq_len], sorted along the sequence. The RoPE module of the model must be
built for at least ``position_bound`` positions (``max_position`` / ``target_len``): every sampler says it, and the
recipe's setup asks it before training.
"""

from __future__ import annotations

from typing import Optional

import torch

from torchtune_longshort.rope.checks import check_positive_int


class RandomPositions:
    """Randomized positional encodings: sorted random subsets of ``range(max_position)``.

    Args:
        max_position: size of the range positions are drawn from (the target context length, L').
    """

    name = "random_pos"

    def __init__(self, max_position: int) -> None:
        self.max_position = check_positive_int("max_position", max_position)

    def sample(self, batch_size: int, seq_len: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """LongTensor [batch_size, seq_len] of sorted, distinct positions in ``[0, max_position)``."""
        check_positive_int("batch_size", batch_size)
        check_positive_int("seq_len", seq_len)
        if seq_len > self.max_position:
            raise ValueError(
                f"seq_len={seq_len} is larger than max_position={self.max_position}: random_pos draws distinct "
                "positions, so it needs max_position >= seq_len"
            )
        keys = torch.rand(batch_size, self.max_position, generator=generator)
        return keys.topk(seq_len, dim=1).indices.sort(dim=1).values

    @property
    def position_bound(self) -> int:
        """Every position it draws is below this."""
        return self.max_position

    def __repr__(self) -> str:
        return f"RandomPositions(max_position={self.max_position})"


class PoSEPositions:
    """PoSE: chunked windows with random skips inside ``target_len``.

    Two chunks (the paper's default) follow the released training code (``train_pose.py``): the first chunk's
    length is uniform on ``1..ceil(seq_len / 2)`` and the second chunk's positions skip ``u ~ U{0..target_len -
    seq_len}``. More chunks (no released code): N-1 distinct uniform cut points, N-1 sorted uniform skips. Only the
    positions skip; the tokens stay contiguous (the released code also skips text between its chunks, which would
    break the long-short pair: windows A and B share their tokens).

    Args:
        target_len: L_c, the context length to simulate (positions stay below it).
        num_chunks: N >= 1 chunks per window (paper default: 2).
    """

    name = "pose"

    def __init__(self, target_len: int, num_chunks: int = 2) -> None:
        self.target_len = check_positive_int("target_len", target_len)
        self.num_chunks = check_positive_int("num_chunks", num_chunks)

    def sample(self, batch_size: int, seq_len: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """LongTensor [batch_size, seq_len]: per row, N chunks of consecutive positions, non-decreasing skips."""
        check_positive_int("batch_size", batch_size)
        check_positive_int("seq_len", seq_len)
        if seq_len > self.target_len:
            raise ValueError(f"seq_len={seq_len} is larger than target_len={self.target_len}: PoSE needs "
                             "seq_len <= target_len")
        if self.num_chunks > seq_len:
            raise ValueError(f"num_chunks={self.num_chunks} is larger than seq_len={seq_len}: every chunk needs a "
                             "token")
        slack = self.target_len - seq_len
        rows = []
        for _ in range(batch_size):
            if self.num_chunks == 2:  # the released rule: the first chunk is at most half the window
                cuts = torch.randint(1, (seq_len + 1) // 2 + 1, (1,), generator=generator)
            else:  # chunk boundaries: N-1 distinct cut points in 1..seq_len-1
                cuts = (torch.randperm(seq_len - 1, generator=generator)[: self.num_chunks - 1] + 1).sort().values
            # Skips: u_0 = 0, then N-1 sorted uniform draws from {0..slack}.
            skips = torch.randint(0, slack + 1, (self.num_chunks - 1,), generator=generator).sort().values
            chunk_of = torch.zeros(seq_len, dtype=torch.long)
            chunk_of[cuts] = 1
            chunk_of = chunk_of.cumsum(0)
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), skips])[chunk_of]
            rows.append(torch.arange(seq_len) + offsets)
        return torch.stack(rows)

    @property
    def position_bound(self) -> int:
        """Every position it draws is below this."""
        return self.target_len

    def __repr__(self) -> str:
        return f"PoSEPositions(target_len={self.target_len}, num_chunks={self.num_chunks})"


def check_position_bound(sampler, model_max_len: Optional[int]) -> None:
    """Refuse a sampler (one of these or of one's own: ``sample(batch_size, seq_len, generator)``) whose positions
    reach past the model's ``model_max_len`` (None: not known). Its bound is its ``position_bound``; a sampler of
    one's own written before that property is read by the names the setup read then (``max_position``,
    ``target_len``); one with neither goes unchecked."""
    if not hasattr(sampler, "sample"):
        raise ValueError(f"position_sampler: {type(sampler).__name__} has no sample(batch_size, seq_len, generator)")
    bound = getattr(sampler, "position_bound", None)
    if bound is None:
        bound = getattr(sampler, "max_position", None) or getattr(sampler, "target_len", None)
    if model_max_len is not None and bound is not None and bound > model_max_len:
        raise ValueError(f"position_sampler draws positions up to {bound}, above the model's max_seq_len="
                         f"{model_max_len}: scale RoPE to at least that length (model.max_seq_len)")
