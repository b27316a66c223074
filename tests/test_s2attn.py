"""S2-Attn against a naive masked-softmax reference built from the definition, causality (no token sees a later
one), G = s equals full causal attention, and the model-level switch (training only)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from torchtune_longshort.models import disable_s2_attn, enable_s2_attn, s2_attention


def naive_s2(q, k, v, G):
    """Float64 softmax attention with an explicit [s, s] mask per head from the definition of the groups."""
    b, h, s, d = q.shape
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    plain = (j <= i) & (i // G == j // G)
    shifted = (j <= i) & ((i + G // 2) // G == (j + G // 2) // G)
    out = torch.empty(b, h, s, d, dtype=torch.float64)
    for head in range(h):
        mask = plain if head < h // 2 else shifted
        scores = (q[:, head].double() @ k[:, head].double().transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(~mask, float("-inf"))
        out[:, head] = scores.softmax(-1) @ v[:, head].double()
    return out


@pytest.mark.parametrize("s,G,h", [(32, 8, 4), (24, 6, 3), (16, 4, 2), (64, 16, 8)])
def test_matches_naive_reference(s, G, h):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, h, s, 8) for _ in range(3))
    torch.testing.assert_close(s2_attention(q, k, v, G).double(), naive_s2(q, k, v, G), rtol=1e-5, atol=1e-5)


def looped_s2(q, k, v, G):
    """LongLoRA's groups (its flash-attention code's cu_seqlens) by explicit loops over heads and groups: heads
    ``h//2 ..`` start their groups at 0, G/2, 3G/2, ..., the others at 0, G, 2G, ...; causal softmax inside each."""
    b, h, s, d = q.shape
    out = torch.zeros(b, h, s, d, dtype=torch.float64)
    for head in range(h):
        starts = [0, *range(G // 2, s, G)] if head >= h // 2 else list(range(0, s, G))
        for a, e in zip(starts, [*starts[1:], s]):
            for i in range(a, e):
                scores = (k[:, head, a:i + 1].double() @ q[:, head, i].double()[:, :, None])[..., 0] / math.sqrt(d)
                out[:, head, i] = (scores.softmax(-1)[:, :, None] * v[:, head, a:i + 1].double()).sum(1)
    return out


@pytest.mark.parametrize("s,G,h,kv", [(32, 8, 4, 2), (24, 6, 3, 3), (16, 4, 1, 1), (40, 10, 6, 2)])
def test_outputs_and_gradients_match_looped_reference(s, G, h, kv):
    """Outputs and the gradients of q and of the (GQA: un-expanded, as torchtune expands them) k, v."""
    torch.manual_seed(3)
    q = torch.randn(2, h, s, 8, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, kv, s, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = torch.randn(2, h, s, 8, dtype=torch.float64)

    def expand(x):
        return x.unsqueeze(2).expand(2, kv, h // kv, s, 8).flatten(1, 2)

    grads = []
    for fn in (s2_attention, looped_s2):
        out = fn(q, expand(k), expand(v), G)
        grads.append((out.detach(), *torch.autograd.grad((out * w).sum(), (q, k, v))))
    for ours, ref in zip(*grads):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)


def test_group_equal_to_sequence_is_full_causal_attention():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 4, 32, 8) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(s2_attention(q, k, v, 32), full)


def test_no_token_attends_to_a_later_one():
    torch.manual_seed(2)
    s, G = 32, 8
    q, k, v = (torch.randn(1, 4, s, 8, requires_grad=True) for _ in range(3))
    out = s2_attention(q, k, v, G)
    for i in (0, 3, G // 2 - 1, G // 2, G - 1, s - G // 2 - 1, s - 1):
        k.grad = v.grad = None
        out[:, :, i].sum().backward(retain_graph=True)
        later = slice(i + 1, None)
        assert k.grad[:, :, later].abs().max().item() == 0 if i + 1 < s else True
        assert v.grad[:, :, later].abs().max().item() == 0 if i + 1 < s else True
    # The first G/2 tokens in particular (LongLoRA's roll wraps them after the sequence end): perturbing the
    # last tokens leaves them unchanged.
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[:, :, -G // 2:] += 10
    v2[:, :, -G // 2:] += 10
    out2 = s2_attention(q.detach(), k2, v2, G)
    torch.testing.assert_close(out2[:, :, : s - G // 2], out.detach()[:, :, : s - G // 2])


def test_bad_group_sizes_fail_clearly():
    q = torch.randn(1, 2, 30, 4)
    with pytest.raises(ValueError, match="multiple of the group size: seq_len=30, group_size=8"):
        s2_attention(q, q, q, 8)
    with pytest.raises(ValueError, match="group_size=5"):
        s2_attention(q, q, q, 5)


def tiny_llama2(max_seq_len=64):
    from torchtune.models.llama2 import llama2

    torch.manual_seed(0)
    return llama2(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=max_seq_len)


def test_model_switch_training_only_and_reversible():
    model = tiny_llama2()
    tokens = torch.randint(0, 64, (2, 64))
    model.train()
    with torch.no_grad():
        full_train = model(tokens)
    model.eval()
    with torch.no_grad():
        full_eval = model(tokens)
    enable_s2_attn(model, group_size=16)
    assert model.s2_attn == {"group_size": 16, "group_size_ratio": None}
    model.train()
    with torch.no_grad():
        s2_train = model(tokens)
    assert (s2_train - full_train).abs().max() > 1e-3  # sparse attention does change training outputs
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), full_eval)  # full attention at evaluation
    enable_s2_attn(model, group_size=64)  # re-enabling replaces, G = s is full attention
    model.train()
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), full_train)
    disable_s2_attn(model)
    assert not hasattr(model, "s2_attn")
    with pytest.raises(ValueError, match="group_size_ratio=0"):
        enable_s2_attn(model, group_size_ratio=0)
