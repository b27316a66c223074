"""Greedy decoding of a batch of prompts with a torchtune decoder and its KV cache (``generate_until``'s engine).

Prompts are left-padded; positions and attention masks skip the padding, as torchtune's ``generate`` does. The
prompt is prefilled in chunks (bounding the ``[q, kv]`` mask), and only the last position is ever projected to the
vocabulary (:mod:`torchtune_longshort.hidden_states`).
"""

from __future__ import annotations

from typing import Callable, List, Sequence

import torch
from torch import nn

from torchtune_longshort.hidden_states import decoder_of, hidden_state_output

# Prefill of a generation prompt runs in chunks of this many positions (bounds the [q, kv] mask size).
PREFILL_CHUNK = 4096


class _Batch:
    """Left-padded prompt tokens, their position ids and the causal masks that hide the padding."""

    def __init__(self, prompts: List[List[int]], max_new_tokens: int, pad_id: int, device: torch.device):
        from torchtune.generation import get_position_ids_from_padding_mask

        self.size = len(prompts)
        self.prompt_len = max(len(p) for p in prompts)
        self.total = self.prompt_len + max_new_tokens
        tokens = torch.full((self.size, self.prompt_len), pad_id, dtype=torch.long)
        valid = torch.zeros((self.size, self.total), dtype=torch.bool)
        for r, p in enumerate(prompts):
            tokens[r, self.prompt_len - len(p) :] = torch.tensor(p, dtype=torch.long)
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

    def run(self, model: nn.Module, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """The last position's final hidden state ``[b, d]`` after ``tokens`` placed at ``start``."""
        end = start + tokens.shape[1]
        with hidden_state_output(model):
            h = model(tokens, input_pos=self.input_pos[:, start:end], mask=self.mask_rows(start, end))
        return h[:, -1]


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
) -> List[List[int]]:
    """Greedy continuations of ``prompts`` (token ids): per row the generated ids, EOS excluded.

    A row stops at EOS or once ``decode`` of its generated ids contains a ``stop`` string.
    """
    from torchtune.modules.common_utils import local_kv_cache

    batch = _Batch(prompts, max_new_tokens, pad_id, device)
    output = decoder_of(model).output
    out: List[List[int]] = [[] for _ in range(batch.size)]
    done = torch.zeros(batch.size, dtype=torch.bool)
    with local_kv_cache(model, batch_size=batch.size, device=device, dtype=dtype, decoder_max_seq_len=batch.total):
        for s in range(0, batch.prompt_len, PREFILL_CHUNK):
            last = batch.run(model, batch.tokens[:, s : min(batch.prompt_len, s + PREFILL_CHUNK)], s)
        for step in range(max_new_tokens):
            nxt = output(last).float().argmax(dim=-1)
            for r in range(batch.size):
                if done[r]:
                    continue
                t = int(nxt[r])
                if t == eos_id:
                    done[r] = True
                    continue
                out[r].append(t)
                if stop and any(x and x in decode(out[r]) for x in stop):
                    done[r] = True
            if bool(done.all()) or step == max_new_tokens - 1:
                break
            last = batch.run(model, nxt[:, None], batch.prompt_len + step)
    return out
