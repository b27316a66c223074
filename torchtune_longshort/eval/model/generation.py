"""Greedy decoding of a batch of prompts with a torchtune decoder and its KV cache (``generate_until``'s engine).

Prompts are left-padded; positions and attention masks skip the padding, as torchtune's ``generate`` does. The
prompt is prefilled in chunks (bounding the ``[q, kv]`` mask), and only the last position is ever projected to the
vocabulary (:mod:`torchtune_longshort.hidden_states`).

A RoPE whose rotation depends on the sequence's length (``ScaledRoPE.length_dependent``: dynamic NTK, LongRoPE,
CLEX) is asked two things, so that the tokens equal transformers' ``generate`` (``Phi3ForCausalLM``'s for LongRoPE):
the prompt's chunks run under the length of the whole prompt (``ScaledRoPE.sequence_length``: one prefill of the
whole prompt; before, each 4096-token chunk took its own length's base or t), and before each step whether the cached
keys are stale (``ScaledRoPE.kv_cache_stale``: LongRoPE's first step past its switch length), in which case the cache
is dropped and the whole sequence prefilled again. Other methods answer "no" and keep their cache (dynamic NTK: as
transformers). Such a model is given prompts of one length per batch (the adapter's ``length_batches``).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable, Dict, List, Sequence

import torch
from torch import nn

from torchtune_longshort.hidden_states import decoder_of, hidden_state_output
from torchtune_longshort.rope import ScaledRoPE, rope_modules

# Generation kwargs greedy decoding honours as lm-eval's hf model does: the stop strings and the budget, sampling off
# (lm-eval's ``normalize_gen_kwargs`` sets temperature 0 then), and top_p / top_k, which transformers ignores without
# sampling. Any other key changes what hf's ``model.generate`` decodes (beams, penalties, a minimum length) unless it
# has its neutral value here; the longshort model decodes plain greedy, so such a key is refused, not ignored.
GREEDY_KWARGS = frozenset({"until", "max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens",
                           "do_sample", "temperature", "top_p", "top_k"})
NEUTRAL_KWARGS = {"num_beams": 1, "num_beam_groups": 1, "repetition_penalty": 1.0, "length_penalty": 1.0,
                  "no_repeat_ngram_size": 0, "min_new_tokens": 0, "min_length": 0, "num_return_sequences": 1}


def not_greedy(gen_kwargs: Dict[str, Any]) -> str:
    """Why the longshort model cannot decode as ``gen_kwargs`` asks (``""``: it can): sampling, or a key that makes
    transformers' ``generate`` (lm-eval's hf) decode other than plain greedy (``num_beams=4``,
    ``repetition_penalty=1.3``)."""
    kwargs = dict(gen_kwargs or {})
    if str(kwargs.get("do_sample")).lower() in ("true", "1", "yes"):
        return (f"do_sample={kwargs['do_sample']}: the longshort model decodes greedily only (accepted: "
                "do_sample=false, or leave it out); lm-eval's hf model samples")
    if kwargs.get("do_sample") is None and _above_zero(kwargs.get("temperature")):
        # lm-eval's normalize_gen_kwargs turns sampling on for a temperature without do_sample (hf samples)
        return (f"temperature={kwargs['temperature']} without do_sample: lm-eval's hf model samples at it, the "
                "longshort model decodes greedily only (accepted: temperature=0, or do_sample=false)")
    other = []
    for key, value in kwargs.items():
        if key in GREEDY_KWARGS:
            continue
        try:
            neutral = key in NEUTRAL_KWARGS and float(value) == NEUTRAL_KWARGS[key]
        except (TypeError, ValueError):
            neutral = False
        if not neutral:
            other.append(f"{key}={value}")
    if not other:
        return ""
    return (f"{', '.join(other)}: the longshort model decodes plain greedy, which lm-eval's hf model changes with "
            f"these (transformers' generate); accepted: {', '.join(sorted(GREEDY_KWARGS))}, and "
            + ", ".join(f"{k}={v}" for k, v in NEUTRAL_KWARGS.items()))


# The generation kwargs lm-eval's ``normalize_gen_kwargs`` converts for every model (hf's and ours): a value these
# cannot read ended the run at its first generation, after the model had loaded ("could not convert string to float:
# 'abc'", naming neither the option nor the key).
NUMERIC_KWARGS = {"temperature": (float, "a number, e.g. temperature=0"),
                  **{k: (int, f"a whole number of tokens, e.g. {k}=64")
                     for k in ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")}}


def unreadable_value(gen_kwargs: Dict[str, Any]) -> str:
    """Why lm-eval cannot read ``gen_kwargs`` (parsed as lm-eval parses ``--gen_kwargs``; ``""``: it can): the first
    key of :data:`NUMERIC_KWARGS` whose value its conversion refuses, with what the key takes. Of the token-count
    aliases lm-eval converts only the first not None (their order here is its priority): a null one is its default."""
    given = gen_kwargs or {}
    tokens = next((k for k, (kind, _) in NUMERIC_KWARGS.items() if kind is int and given.get(k) is not None), None)
    for key, (kind, takes) in NUMERIC_KWARGS.items():
        if key in given and (kind is float or key == tokens):
            try:
                kind(gen_kwargs[key])
            except (TypeError, ValueError):
                return f"{key}={gen_kwargs[key]}: lm-eval reads {key} as {takes}"
    return ""


def _above_zero(value: Any) -> bool:
    try:
        return float(value) > 0.0
    except (TypeError, ValueError):
        return False


# Prefill of a generation prompt runs in chunks of this many positions (bounds the [q, kv] mask size).
PREFILL_CHUNK = 4096


class _Batch:
    """Left-padded tokens (the prompts, then the generated ids), their position ids and the causal masks that hide
    the padding."""

    def __init__(self, prompts: List[List[int]], max_new_tokens: int, pad_id: int, device: torch.device):
        from torchtune.generation import get_position_ids_from_padding_mask

        self.size = len(prompts)
        self.prompt_len = max(len(p) for p in prompts)
        self.total = self.prompt_len + max_new_tokens
        tokens = torch.full((self.size, self.total), pad_id, dtype=torch.long)
        valid = torch.zeros((self.size, self.total), dtype=torch.bool)
        for r, p in enumerate(prompts):
            tokens[r, self.prompt_len - len(p) : self.prompt_len] = torch.tensor(p, dtype=torch.long)
            valid[r, self.prompt_len - len(p) :] = True
        self.input_pos = get_position_ids_from_padding_mask(valid).to(device)
        self.valid = valid.to(device)
        self.tokens = tokens.to(device)
        self._ar = torch.arange(self.total, device=device)

    def mask_rows(self, start: int, end: int) -> torch.Tensor:
        """``[b, end-start, total]``: causal, padding keys hidden; a row always sees itself (no empty softmax)."""
        q = self._ar[start:end]
        m = (self._ar[None, :] <= q[:, None])[None] & self.valid[:, None, :]
        m[:, torch.arange(end - start), q] = True
        return m

    def run(self, model: nn.Module, start: int, end: int) -> torch.Tensor:
        """The last position's final hidden state ``[b, d]`` after the tokens of columns ``start:end``."""
        with hidden_state_output(model):
            h = model(self.tokens[:, start:end], input_pos=self.input_pos[:, start:end],
                      mask=self.mask_rows(start, end))
        return h[:, -1]

    def prefill(self, model: nn.Module, end: int, chunk: int, ropes: Sequence[ScaledRoPE]) -> torch.Tensor:
        """Columns ``0:end`` into an empty KV cache, ``chunk`` at a time, each under the RoPE of the whole ``end``
        positions; returns the last position's hidden state."""
        with ExitStack() as stack:
            for rope in ropes:
                stack.enter_context(rope.sequence_length(end))
            for s in range(0, end, chunk):
                last = self.run(model, s, min(end, s + chunk))
        return last


def _take(out: List[List[int]], done: torch.Tensor, nxt: torch.Tensor, eos_id: int, decode, stop) -> None:
    """Append each unfinished row's token; a row finishes at EOS (not appended) or once a ``stop`` string shows.
    ``nxt`` is read from the device once for the batch (not a sync per row)."""
    for r, t in enumerate(nxt.tolist()):
        if done[r]:
            continue
        if t == eos_id:
            done[r] = True
            continue
        out[r].append(t)
        if stop and any(x and x in decode(out[r]) for x in stop):
            done[r] = True


@torch.no_grad()
def greedy_generate(
    model: nn.Module,
    prompts: List[List[int]],
    max_new_tokens: int,
    *,
    pad_id: int,
    eos_id: int,
    decode: Callable[[List[int]], str],
    dtype: torch.dtype,
    device: torch.device,
    stop: Sequence[str] = (),
    prefill_chunk: int = PREFILL_CHUNK,
) -> List[List[int]]:
    """Greedy continuations of ``prompts`` (token ids): per row the generated ids, EOS excluded.

    A row stops at EOS or once ``decode`` of its generated ids contains a ``stop`` string. ``prefill_chunk``: the
    positions of one prefill call.
    """
    from torchtune.modules.common_utils import delete_kv_caches, local_kv_cache

    # deferred: torchtune (its modules load with the first generation, as local_kv_cache's import above)
    from torchtune_longshort.eval.model.kv_cache import count_on_host

    if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1:
        raise ValueError(f"prefill_chunk={prefill_chunk!r} is not accepted: expected an integer >= 1")
    batch = _Batch(prompts, max_new_tokens, pad_id, device)
    decoder = decoder_of(model)
    ropes = rope_modules(model)
    out: List[List[int]] = [[] for _ in range(batch.size)]
    done = torch.zeros(batch.size, dtype=torch.bool)
    try:
        with local_kv_cache(model, batch_size=batch.size, device=device, dtype=dtype,
                            decoder_max_seq_len=batch.total):
            count_on_host(model)  # the caches' bounds checks read no device value (one sync per layer per token)
            last = batch.prefill(model, batch.prompt_len, prefill_chunk, ropes)
            for step in range(max_new_tokens):
                nxt = decoder.output(last).float().argmax(dim=-1)
                _take(out, done, nxt, eos_id, decode, stop)
                if bool(done.all()) or step == max_new_tokens - 1:
                    break
                cur = batch.prompt_len + step  # the new token's column; the cache holds columns 0..cur-1
                batch.tokens[:, cur] = nxt
                if any(rope.kv_cache_stale(cur, cur + 1) for rope in ropes):
                    decoder.reset_caches()
                    last = batch.prefill(model, cur + 1, prefill_chunk, ropes)
                else:
                    last = batch.run(model, cur, cur + 1)
    except BaseException:
        # local_kv_cache deletes the caches when its body fails, not when setting them up does (out of memory
        # part-way through the layers): the next generation would find them and refuse
        if model.caches_are_setup():
            delete_kv_caches(model)
        raise
    return out
