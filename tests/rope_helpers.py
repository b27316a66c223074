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


def position_reads(monkeypatch) -> list:
    """A list that gets one entry each time a RoPE reads its positions' range from the device
    (``rope.base._position_range``), the read a GPU waits for."""
    import torchtune_longshort.rope.base as base

    reads, real = [], base._position_range
    monkeypatch.setattr(base, "_position_range", lambda t: reads.append(1) or real(t))
    return reads


def linear_llama2(num_layers: int):
    """A tiny Llama-2 (vocabulary 64, 64 positions) with linear RoPE scaling at factor 2, seeded."""
    from torchtune.models.llama2 import llama2

    from torchtune_longshort.models.rope_scaling import apply_rope_scaling

    torch.manual_seed(0)
    model = llama2(vocab_size=64, num_layers=num_layers, num_heads=2, num_kv_heads=1, embed_dim=32, max_seq_len=64)
    apply_rope_scaling(model, "linear", max_seq_len=64, factor=2.0)
    return model
