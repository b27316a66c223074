"""Long-short misalignment of a language model (paper Eq. 4).

For a text ``x`` and suffix lengths ``l1, l2`` drawn uniformly from ``[L/2, L]``, compare the model's next-token
distributions after the last ``l1`` and the last ``l2`` tokens of ``x`` (same target token, two context lengths):

    M = E_x E_{l1, l2 ~ U[L/2, L]} D( p(. | x[-l1:]), p(. | x[-l2:]) ),   D = SCE (Eq. 3), Jeffreys or JS.

Works with any torchtune ``TransformerDecoder`` (or any callable ``tokens [b, s] -> logits [b, s, vocab]``); only the
last position is used. A decoder is read through
:func:`~torchtune_longshort.hidden_states.last_position_logits`: no ``[b, s, vocab]`` tensor, and the right values
when it returns hidden states (after ``LongShortLoss.set_model_output``, mid-training) or logit chunks. The CLI and
the eval model pass ``functools.partial(last_position_logits, decoder)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import torch

from torchtune_longshort.config.values import check_seed
from torchtune_longshort.devices import require_device
from torchtune_longshort.hidden_states import decoder_of, last_position_logits
from torchtune_longshort.intervals import t_half_width

from torchtune_longshort.loss.divergences import DIVERGENCES, divergence_fn
from torchtune_longshort.windows import suffix_length_range

Model = Callable[[torch.Tensor], torch.Tensor]


def _projects_last_position(model: Model) -> bool:
    """Whether ``model`` is a torchtune decoder read through ``last_position_logits``: any but one set to logit
    chunks (those are read as a callable's output; a decoder cannot be in both modes)."""
    if not isinstance(model, torch.nn.Module):
        return False
    try:
        decoder = decoder_of(model)
    except TypeError:
        return False
    return not getattr(decoder, "num_output_chunks", 0)


# How many texts (one (l1, l2) draw each) the metric averages over unless told otherwise. The one default for every
# way of running it: the longshort-misalignment CLI's --num-samples and the misalignment_<L> task's mis_num_samples
# (and the study's eval.mis_num_samples) all take it from here. 100 keeps the 95% CI near a fifth of the spread of
# the per-text values.
DEFAULT_NUM_SAMPLES = 100


def _vocab_size(model: Model) -> Optional[int]:
    """The token-embedding rows of a torchtune decoder (None for another callable: it checks its own ids)."""
    if not isinstance(model, torch.nn.Module):
        return None
    try:
        embeddings = getattr(decoder_of(model), "tok_embeddings", None)
    except TypeError:
        return None
    return getattr(embeddings, "num_embeddings", None)


def _last_logits(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    if _projects_last_position(model):
        return last_position_logits(model, tokens)[:, -1, :]
    out = model(tokens)
    if isinstance(out, (list, tuple)):  # chunked output
        out = out[-1]
    return out[:, -1, :].float()


@torch.no_grad()
def suffix_misalignment(
    model: Model,
    tokens: torch.Tensor,
    l1: int,
    l2: int,
    divergences: Sequence[str] = DIVERGENCES,
) -> Dict[str, float]:
    """Divergences between the next-token distributions after the last ``l1`` and the last ``l2`` tokens.

    Args:
        model: tokens ``[b, s]`` -> logits ``[b, s, vocab]``.
        tokens: 1-D ``[T]`` (or ``[1, T]``) token ids, ``T >= max(l1, l2)``.
        l1, l2: suffix lengths (context sizes) to compare.
        divergences: names from ``DIVERGENCES``.

    Returns:
        ``{divergence: value}`` (floats).
    """
    if tokens.dim() == 2:
        if tokens.shape[0] != 1:
            raise ValueError(f"tokens has shape {tuple(tokens.shape)}; pass one sequence ([T] or [1, T])")
        tokens = tokens[0]
    T = tokens.shape[0]
    for name, l in (("l1", l1), ("l2", l2)):
        if not 1 <= l <= T:
            raise ValueError(f"{name}={l} must be in [1, len(tokens)={T}]")
    la = _last_logits(model, tokens[T - l1 :].unsqueeze(0))
    lb = _last_logits(model, tokens[T - l2 :].unsqueeze(0))
    return {d: float(divergence_fn(d)(la, lb)[0]) for d in divergences}


@dataclass
class MisalignmentResult:
    """Per-divergence summary (mean, std, the Student-t 95% CI of the mean) and the raw values."""

    length: int
    num_samples: int
    min_len: int
    max_len: int
    summary: Dict[str, Dict[str, float]] = field(default_factory=dict)
    values: Dict[str, List[float]] = field(default_factory=dict)
    pairs: List[List[int]] = field(default_factory=list)

    def to_dict(self, with_values: bool = True) -> Dict:
        d = {
            "length": self.length,
            "num_samples": self.num_samples,
            "min_len": self.min_len,
            "max_len": self.max_len,
            "summary": self.summary,
        }
        if with_values:
            d["values"] = self.values
            d["pairs"] = self.pairs
        return d


def summarize(values: Sequence[float]) -> Dict[str, Optional[float]]:
    """Mean, sample std, standard error and the Student-t 95% confidence interval of the mean
    (:mod:`torchtune_longshort.intervals`), cut at 0: every divergence is >= 0, and the interval of a few skewed
    values crossed it (``[-0.18925, 0.34376]`` of 2 samples). One value has no spread to measure: ``std``, ``se``
    and the interval are ``None`` (not 0, which would read as a point known exactly)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to summarize")
    mean = sum(values) / n
    if n == 1:
        return {"mean": mean, "std": None, "se": None, "ci95_low": None, "ci95_high": None, "n": 1}
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_half_width(std, n)
    return {"mean": mean, "std": std, "se": std / math.sqrt(n), "ci95_low": max(0.0, mean - half),
            "ci95_high": mean + half,
            "n": n}


def summary_line(name: str, s: Dict[str, Optional[float]]) -> str:
    """One divergence's summary as the CLI prints it: mean and 95% CI, or why there is no interval."""
    if s["ci95_low"] is None:
        return f"{name:9s} mean {s['mean']:.5f}  95% CI: none (n={s['n']}; an interval needs 2 samples or more)"
    return f"{name:9s} mean {s['mean']:.5f}  95% CI [{s['ci95_low']:.5f}, {s['ci95_high']:.5f}]  n={s['n']}"


def _checked_arguments(length: int, num_samples: Optional[int], min_len: Optional[int], max_len: Optional[int],
                       divergences: Sequence[str], seed: int, device: Union[str, torch.device]):
    """:func:`misalignment_metric`'s arguments checked, each refused by name: ``(min_len, max_len, divergences,
    device)`` resolved."""
    if not isinstance(length, int) or length < 2:
        raise ValueError(f"length={length!r} must be an int >= 2")
    eq4_min, eq4_max = suffix_length_range(length)
    min_len = eq4_min if min_len is None else min_len
    max_len = eq4_max if max_len is None else max_len
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len ({min_len}) <= max_len ({max_len})")
    if num_samples is not None and (not isinstance(num_samples, int) or isinstance(num_samples, bool)
                                    or num_samples < 1):
        # 0 or -1 ended as "no sequences were given", naming the data
        raise ValueError(f"num_samples={num_samples!r} must be an int >= 1 (or None: every sequence given)")
    if isinstance(divergences, str):  # one name: its letters were read as names ("divergence='s' is not known")
        divergences = [divergences]
    divergences = list(dict.fromkeys(divergences))  # `--divergences js js` appended each sample twice: n doubled
    if not divergences:
        raise ValueError(f"divergences={divergences!r} names none: give one or more of {list(DIVERGENCES)}")
    for d in divergences:
        divergence_fn(d)
    check_seed(seed, "seed")
    device = require_device(device)  # the rule of the CLI: a device this machine lacks failed inside torch
    return min_len, max_len, divergences, device


def _checked_sequence(seq: Any, index: int, max_len: int, vocab: Optional[int]) -> torch.Tensor:
    """Sequence ``index``'s last ``max_len`` token ids as a long tensor; refused when it holds no integer ids, fewer
    than ``max_len`` tokens, or ids past the model's vocabulary ``vocab``."""
    seq = torch.as_tensor(seq)
    if seq.is_floating_point() or seq.is_complex() or seq.dtype == torch.bool:
        # cast to long, 0.37 became token 0: a number for text the model never saw
        raise ValueError(f"sequence {index} has dtype {seq.dtype}: expected integer token ids")
    seq = seq.to(torch.long).reshape(-1)
    if seq.shape[0] < max_len:
        raise ValueError(
            f"sequence {index} has {seq.shape[0]} tokens; the metric needs >= max_len={max_len}"
        )
    used = seq[-max_len:]
    if vocab is not None and not 0 <= int(used.min()) <= int(used.max()) < vocab:  # an IndexError in torch
        raise ValueError(f"sequence {index} holds token ids in [{int(used.min())}, {int(used.max())}], "
                         f"outside the model's vocabulary [0, {vocab}): tokenize with the model's own tokenizer")
    return used


@torch.no_grad()
def misalignment_metric(
    model: Model,
    sequences: Iterable[torch.Tensor],
    length: int,
    num_samples: Optional[int] = None,
    min_len: Optional[int] = None,
    max_len: Optional[int] = None,
    divergences: Sequence[str] = DIVERGENCES,
    seed: int = 0,
    device: Union[str, torch.device] = "cpu",
    progress: bool = True,
) -> MisalignmentResult:
    """Estimate Eq. 4 over a corpus: one ``(l1, l2)`` draw per sequence.

    Args:
        model: tokens -> logits (e.g. a torchtune ``TransformerDecoder`` in eval mode).
        sequences: integer token-id tensors, each with at least ``max_len`` tokens (only the last ``max_len`` are
            used; ids past a torchtune decoder's embedding table are refused).
        length: ``L``; suffix lengths are drawn from ``[min_len, max_len]`` = ``[L/2, L]`` by default.
        num_samples: stop after this many sequences (``None``: all); fewer sequences give fewer samples.
        divergences: which divergences to report (SCE first by default), names or one name; a name given twice is
            reported once.
        seed: seed of the ``(l1, l2)`` draws.
        device: where the sequences go (the model's device); one this machine lacks is refused
            (:func:`~torchtune_longshort.devices.require_device`).
        progress: show a tqdm bar.

    Returns:
        :class:`MisalignmentResult`.
    """
    min_len, max_len, divergences, device = _checked_arguments(length, num_samples, min_len, max_len, divergences,
                                                               seed, device)
    vocab = _vocab_size(model)
    gen = torch.Generator().manual_seed(seed)
    values: Dict[str, List[float]] = {d: [] for d in divergences}
    pairs: List[List[int]] = []
    it = iter(sequences)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_samples, desc=f"misalignment L={length}", unit="seq")
    while num_samples is None or len(pairs) < num_samples:
        try:
            seq = next(it)
        except StopIteration:
            break
        used = _checked_sequence(seq, len(pairs), max_len, vocab)
        l1, l2 = (int(x) for x in torch.randint(min_len, max_len + 1, (2,), generator=gen))
        res = suffix_misalignment(model, used.to(device), l1, l2, divergences)
        for d in divergences:
            values[d].append(res[d])
        pairs.append([l1, l2])
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    if not pairs:
        raise ValueError("no sequences were given to the misalignment metric")
    return MisalignmentResult(
        length=length,
        num_samples=len(pairs),
        min_len=min_len,
        max_len=max_len,
        summary={d: summarize(v) for d, v in values.items()},
        values=values,
        pairs=pairs,
    )
