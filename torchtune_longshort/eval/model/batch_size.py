"""How the ``longshort`` model cuts a request list (longest first) into batches: a fixed ``batch_size``, or lm-eval's
``batch_size=auto`` / ``auto:N`` with ``max_batch_size``.

- Fixed: batches of ``batch_size``; a batch that runs out of memory runs again a request at a time
  (:func:`~.memory.run_fitting`).
- ``auto``: batches start at ``max_batch_size`` (default 64, as lm-eval's ``hf``). A batch that runs out of memory
  is split in halves and retried, and the size that fitted is kept for the batches that follow: the requests run
  longest first, so it fits the rest. A request that does not fit alone is refused NaN with the reason, as with a
  fixed size, and the next batch starts at the size its own first try had (its rows are shorter). ``auto:N``: the
  size goes back to ``max_batch_size`` at ``N`` evenly spaced points of the request list (lm-eval ``hf``'s
  re-detection; ``auto`` is ``auto:1``), and again at each new request list (each ``loglikelihood`` call, each
  ``generate_until`` group).
- On a CPU, running out of memory is usually the kernel killing the process, not an error to catch: before each
  batch its size is bounded by the memory free for it (:func:`torchtune_longshort.devices.free_bytes`, plus what the
  process holds above its size after loading: freed blocks glibc keeps for reuse) under the estimate of
  :class:`RowMemory`. A request is still run alone when even one row is over the estimate (as with ``batch_size=1``).

``BatchPlan.sizes`` records, per span of the request list between two returns to ``max_batch_size``, the largest
batch that ran there; lm-eval writes its values into the results' ``config.batch_sizes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

import psutil
import torch
from torch import nn

from torchtune_longshort.devices import free_bytes, out_of_memory_in, release_cached
from torchtune_longshort.eval.model.generation import PREFILL_CHUNK  # the mask of one prefill call: [b, chunk, total]
from torchtune_longshort.eval.model.memory import run_fitting
from torchtune_longshort.hidden_states import decoder_of, output_rows
from torchtune_longshort.rope import rope_modules

Item = TypeVar("Item")
DEFAULT_MAX_BATCH_SIZE = 64  # lm-eval hf's default max_batch_size
# Share of the free memory a CPU batch may take by estimate: the estimate counts torch's tensors, not the allocator's
# slack, and other processes on the machine keep allocating.
CPU_FREE_SHARE = 0.8


def length_batches(model: nn.Module, ordered: Sequence[Item], size: int,
                   length: Callable[[Item], int]) -> Iterator[List[Item]]:
    """``ordered`` (longest first) in batches of at most ``size``. When ``model``'s RoPE depends on the sequence's
    length (``ScaledRoPE.length_dependent``: dynamic NTK, LongRoPE, CLEX), a batch holds one ``length`` only: a
    padded row would take its batch's width as its length, and a request would score differently alone and batched
    (lm-eval's ``hf`` model does; compare it with ``batch_size=1``)."""
    same_length = any(rope.length_dependent for rope in rope_modules(model))
    batch: List[Item] = []
    for item in ordered:
        if batch and (len(batch) == size or (same_length and length(item) != length(batch[0]))):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def _out_features(linear: nn.Module) -> int:
    return int(getattr(linear, "out_features", None) or getattr(linear, "out_dim"))  # nn.Linear / torchtune LoRA


@dataclass(frozen=True)
class RowMemory:
    """A batch's peak tensor bytes by estimate: ``fixed + rows x row_bytes(tokens)``.

    Scoring (``tokens``: a row's input length): the forward's activations, ``(4 x intermediate + 2 x hidden)``
    elements per token (the MLP's gate, up, activated and product tensors beside the residual and its norm; attention
    runs fused, no ``[s, s]`` scores), plus the fixed output projection of one chunk (logits and their log-softmax,
    float32). Measured on SmolLM2-135M in float32 (docs/benchmarks.md): 27,656 bytes per token per row at 256 and at
    1024 tokens, against 29,184 here (+5.5%); the fixed part there is the projection of 341 positions at a time
    (128 MiB).
    Generation (``tokens``: prompt + new tokens) adds the KV cache (``2 x layers x kv_heads x head_dim`` elements per
    token) and the prefill chunk's boolean mask; its activations are those of one prefill chunk."""

    token_bytes: int
    fixed: int = 0
    kv_token_bytes: int = 0

    @classmethod
    def of(cls, model: nn.Module, vocab_size: int, generation: bool = False) -> "RowMemory":
        """The estimate for ``model`` (a torchtune decoder, activations in its embedding's dtype)."""
        decoder = decoder_of(model)
        layer = decoder.layers[0]
        hidden, ffn = int(decoder.tok_embeddings.embedding_dim), _out_features(layer.mlp.w1)
        size = decoder.tok_embeddings.weight.element_size()
        token = size * (4 * ffn + 2 * hidden)
        if not generation:
            return cls(token, fixed=2 * 4 * output_rows(vocab_size) * vocab_size)
        kv = 2 * len(decoder.layers) * layer.attn.num_kv_heads * layer.attn.head_dim * size
        return cls(token, fixed=4 * vocab_size, kv_token_bytes=kv)

    def row_bytes(self, tokens: int) -> int:
        """One row's bytes at ``tokens`` tokens."""
        if not self.kv_token_bytes:
            return tokens * self.token_bytes
        chunk = min(tokens, PREFILL_CHUNK)
        return tokens * self.kv_token_bytes + chunk * self.token_bytes + chunk * tokens

    def rows_that_fit(self, tokens: int, budget: int) -> int:
        """How many rows of ``tokens`` tokens ``budget`` bytes hold by estimate (at least 1)."""
        return max(1, (budget - self.fixed) // max(1, self.row_bytes(tokens)))


class BatchPlan:
    """The batch size requests run with: fixed (``auto`` None) or lm-eval's ``auto:N`` (``auto`` = N, ``size`` =
    ``max_batch_size``); see the module docstring. ``sizes``: what auto ran (lm-eval's ``batch_sizes``)."""

    def __init__(self, size: int, auto: Optional[int], device: torch.device):
        self.size, self.auto, self.device = size, auto, torch.device(device)
        self.sizes: Dict[int, int] = {}
        # on a CPU, what the process holds above this is free for a batch (freed blocks kept for reuse)
        self._base_rss = psutil.Process().memory_info().rss if self.device.type == "cpu" else 0

    def cpu_budget(self) -> Optional[int]:
        """Bytes a CPU batch may take (None off a CPU): a share of the free memory and of what the process holds
        above its size at start (freed blocks its allocator keeps, reused by the next batch)."""
        if self.device.type != "cpu":
            return None
        held = max(0, psutil.Process().memory_info().rss - self._base_rss)
        return int(CPU_FREE_SHARE * ((free_bytes(self.device) or 0) + held))

    def run(self, model: nn.Module, ordered: Sequence[Item], tokens: Callable[[Item], int],
            run: Callable[[Sequence[Item]], None], alone: Callable[[Item, str], None],
            done: Callable[[Sequence[Item]], None], memory: Optional[RowMemory] = None) -> None:
        """``run`` each batch of ``ordered`` (longest first; ``tokens``: an item's length), ``alone(item, error)``
        for an item that does not fit by itself, ``done(batch)`` after each batch; ``memory`` bounds CPU batches."""
        if self.auto is None:
            for chunk in length_batches(model, ordered, self.size, tokens):
                run_fitting(chunk, run, alone, self.device)
                done(chunk)
            return
        same_length = any(rope.length_dependent for rope in rope_modules(model))
        n, pos, span, size, tried = len(ordered), 0, -1, self.size, self.size
        while pos < n:
            if pos * self.auto // n != span:  # auto:N: back to max_batch_size at each of N even points
                span, size, tried, key = pos * self.auto // n, self.size, self.size, len(self.sizes)
            budget = None if memory is None else self.cpu_budget()
            limit = size if budget is None else min(size, memory.rows_that_fit(tokens(ordered[pos]), budget))
            end = pos + 1
            while end < n and end - pos < limit and not (same_length and tokens(ordered[end]) != tokens(ordered[pos])):
                end += 1
            chunk = ordered[pos:end]
            error = out_of_memory_in(lambda: run(chunk))[1]
            if error is not None:
                release_cached(self.device)
            if error is not None and len(chunk) > 1:
                size = (len(chunk) + 1) // 2  # halves, and the half that fits is kept for what follows
                continue
            if error is not None:  # does not fit alone: refused; the next (shorter) requests start where this did
                alone(chunk[0], error[:240])
                size = tried
            self.sizes[key] = max(self.sizes.get(key, 1), len(chunk) if error is None else 1)
            tried = size
            done(chunk)
            pos = end
