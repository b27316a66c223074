"""Helpers shared by the rope/model test files (no tests here): greedy decoding with and without a KV cache."""

from __future__ import annotations

import torch


def greedy_full(model, prompt: torch.Tensor, steps: int):
    """Greedy decoding by a full forward pass over the whole prefix at every step. Returns (tokens, last logits)."""
    seq = prompt.clone()
    out, logits = [], []
    with torch.no_grad():
        for _ in range(steps):
            last = model(seq)[:, -1]
            nxt = last.argmax(-1)
            out.append(nxt)
            logits.append(last)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
    return torch.stack(out, 1)[0], torch.stack(logits, 1)


def greedy_kv(model, prompt: torch.Tensor, steps: int):
    """Greedy decoding with torchtune's KV cache (``setup_caches`` + ``input_pos`` + explicit causal mask)."""
    b, p = prompt.shape
    total = p + steps
    model.setup_caches(batch_size=b, dtype=torch.float32, decoder_max_seq_len=total)
    causal = torch.tril(torch.ones(total, total, dtype=torch.bool))
    out, logits = [], []
    try:
        with torch.no_grad():
            pos = torch.arange(p)[None].expand(b, p)
            last = model(prompt, input_pos=pos, mask=causal[None, :p].expand(b, p, total))[:, -1]
            for i in range(steps):
                nxt = last.argmax(-1)
                out.append(nxt)
                logits.append(last)
                if i == steps - 1:
                    break
                cur = p + i
                last = model(
                    nxt[:, None],
                    input_pos=torch.full((b, 1), cur),
                    mask=causal[None, cur : cur + 1].expand(b, 1, total),
                )[:, -1]
    finally:
        for layer in model.layers:
            layer.attn.kv_cache = None
            layer.attn.cache_enabled = False
    return torch.stack(out, 1)[0], torch.stack(logits, 1)
