"""The final normed hidden states of a torchtune ``TransformerDecoder``, and their projection to the vocabulary.

A decoder's ``forward`` ends with ``self.unembed(h)`` (final norm, then the output projection as a ``[b, s, vocab]``
float32 tensor). The loss, the eval model, the misalignment metric and the recipe's validation need the states
*before* the projection, so that they can project a bounded number of positions at a time. This module is the one
place that swaps ``unembed`` for the final norm (on the instance: parameters and state-dict keys are untouched; a
LoRA, tied or FSDP2-sharded output module is left as is) and the one place that projects in chunks.

Plain PyTorch: the decoder is recognised by its ``norm`` / ``output`` / ``unembed`` attributes, so the loss and the
metrics need not import torchtune.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Tuple

import torch
import torch.nn.functional as F
from torch import nn

# Output projection is applied to at most this many positions at a time, so a 32k-token sequence never holds a full
# [T, vocab] float32 logit matrix (4 GB for Llama-2's 32k vocabulary) ...
OUTPUT_CHUNK = 2048
# ... and to at most this many logits (64 MiB in float32) per chunk, so a large vocabulary shortens the chunk.
OUTPUT_CHUNK_ELEMENTS = 2**24


def decoder_of(model: nn.Module) -> nn.Module:
    """The ``TransformerDecoder`` of ``model``: the model itself or its ``.decoder`` (a wrapper such as a fusion
    model). Raises ``TypeError`` when it has no ``norm`` / ``output`` / ``unembed``."""
    decoder = getattr(model, "decoder", model)
    if not all(hasattr(decoder, name) for name in ("norm", "output", "unembed")):
        raise TypeError(
            "hidden-state output needs a torchtune TransformerDecoder (with .norm, .output, .unembed) or a wrapper "
            f"with one as .decoder; got {type(model).__name__}"
        )
    return decoder


def returns_hidden_states(model: nn.Module) -> bool:
    """Whether ``model`` currently returns final normed hidden states (see :func:`enable_hidden_state_output`)."""
    return "unembed" in vars(decoder_of(model))


def _norm_only(decoder: nn.Module, h: torch.Tensor) -> torch.Tensor:
    return decoder.norm(h)


def enable_hidden_state_output(model: nn.Module) -> nn.Module:
    """Make ``model`` return ``[b, s, d]`` final normed hidden states instead of logits, until
    :func:`restore_logit_output`. Returns the decoder, whose ``output`` module projects them.

    Refuses a decoder set to chunked logits (``num_output_chunks > 0``): the caller would receive hidden states where
    it expects a list of logit chunks.
    """
    decoder = decoder_of(model)
    if getattr(decoder, "num_output_chunks", 0):
        raise ValueError(
            f"the model has num_output_chunks={decoder.num_output_chunks}: hidden-state output projects in chunks "
            "itself. Call model.set_num_output_chunks(0) first (or pass logit chunks to the loss instead)"
        )
    decoder.unembed = _norm_only.__get__(decoder)  # instance attribute shadows the class method
    return decoder


def restore_logit_output(model: nn.Module) -> None:
    """Undo :func:`enable_hidden_state_output`: the model returns logits again (a no-op when it already does)."""
    decoder = decoder_of(model)
    if "unembed" in vars(decoder):
        del decoder.unembed


@contextmanager
def hidden_state_output(model: nn.Module) -> Iterator[nn.Module]:
    """``with hidden_state_output(model) as decoder: h = model(tokens)``: hidden states inside the block, the
    model's previous output after it (a model that already returns hidden states keeps doing so)."""
    already = returns_hidden_states(model)
    decoder = decoder_of(model) if already else enable_hidden_state_output(model)
    try:
        yield decoder
    finally:
        if not already:
            restore_logit_output(model)


def output_rows(vocab_size: int) -> int:
    """Positions projected at a time: at most ``OUTPUT_CHUNK``, and at most ``OUTPUT_CHUNK_ELEMENTS`` float32
    logits (64 MiB: 524 positions of a 32k vocabulary, 130 of a 128k one)."""
    return max(1, min(OUTPUT_CHUNK, OUTPUT_CHUNK_ELEMENTS // max(1, vocab_size)))


def _chunks(output: nn.Module, hidden: torch.Tensor, vocab_size: int) -> Iterator[Tuple[int, torch.Tensor]]:
    """``(start, float32 logits)`` of ``[n, d]`` hidden states, ``output_rows(vocab_size)`` positions at a time."""
    step = output_rows(vocab_size)
    for start in range(0, hidden.shape[0], step):
        yield start, output(hidden[start : start + step]).float()


def project_logprobs(output: nn.Module, hidden: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``[n, d]`` final hidden states -> ``[n, vocab]`` float32 log-probabilities, projected in chunks.

    The result holds all ``n`` rows' distributions; :func:`project_target_logprobs` never does."""
    out = [F.log_softmax(logits, dim=-1) for _, logits in _chunks(output, hidden, vocab_size)]
    return torch.cat(out, dim=0) if out else hidden.new_zeros((0, vocab_size), dtype=torch.float32)


def project_target_logprobs(
    output: nn.Module, hidden: torch.Tensor, target: torch.Tensor, vocab_size: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``log p(target[i] | .)`` (float32 ``[n]``) for ``[n, d]`` final hidden states, and whether every target is
    the argmax (a 0-dim bool tensor on their device: reading it is the caller's, once for all it scores).

    Projects, log-softmaxes (float32), gathers and argmaxes one chunk of positions at a time, so at most one chunk's
    ``[rows, vocab]`` logits exist at once, whatever ``n`` is. Same arithmetic per position as lm-eval's ``hf`` model
    (log_softmax, then gather).
    """
    tok_lp = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    greedy = torch.ones((), dtype=torch.bool, device=hidden.device)
    for start, logits in _chunks(output, hidden, vocab_size):
        t = target[start : start + logits.shape[0]]
        greedy = greedy & (logits.argmax(dim=-1) == t).all()
        tok_lp[start : start + logits.shape[0]] = F.log_softmax(logits, dim=-1).gather(1, t[:, None])[:, 0]
        del logits
    return tok_lp, greedy


@torch.no_grad()
def last_position_logits(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """``tokens [b, s] -> [b, 1, vocab]`` float32 logits of the last position only: the next-token distribution
    after each row's context, without a ``[b, s, vocab]`` tensor (what the misalignment metric needs)."""
    with hidden_state_output(model) as decoder:
        hidden = model(tokens)
    return decoder.output(hidden[:, -1:]).float()
