"""The synthetic models against their definitions written out naively (loops over heads, queries and keys; the
paper's ALiBi and RoPE formulas; App. C.1's sum for the linear model), on the models' own weights."""

import math

import pytest
import torch

from torchtune_longshort.synthetic.models import LinearAttentionModel, SyntheticTransformer


def _ln(x, m):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + m.eps) * m.weight + m.bias


def _lin(x, m):
    return x @ m.weight.T + m.bias


def _gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _rope(x, p):
    """Su et al.'s rotation of consecutive pairs (2i, 2i+1) by p * 10000^(-2i/d), p the position id."""
    out = x.clone()
    d = len(x)
    for i in range(d // 2):
        a = p * 10000.0 ** (-2 * i / d)
        out[2 * i] = x[2 * i] * math.cos(a) - x[2 * i + 1] * math.sin(a)
        out[2 * i + 1] = x[2 * i + 1] * math.cos(a) + x[2 * i] * math.sin(a)
    return out


def _reference(m, tokens, read_pos, ids):
    """Pre-LN causal decoder, one query at a time: softmax over keys j <= i of q.k / sqrt(d_h), ALiBi's
    -2^(-8 (h+1) / H) (p_i - p_j) added, RoPE on q and k at their position ids."""
    b, s = tokens.shape
    H = m.num_heads
    x = m.embed.weight[tokens]
    if m.pe == "learned":
        x = x + m.pos_embed.weight[ids]
    for blk in m.blocks:
        d = x.shape[-1]
        hd = d // H
        qkv = _lin(_ln(x, blk.ln1), blk.qkv)
        att = torch.zeros_like(x)
        for bi in range(b):
            for h in range(H):
                sl = slice(h * hd, (h + 1) * hd)
                q = [qkv[bi, i, :d][sl] for i in range(s)]
                k = [qkv[bi, i, d : 2 * d][sl] for i in range(s)]
                v = [qkv[bi, i, 2 * d :][sl] for i in range(s)]
                if m.pe == "rope":
                    q = [_rope(t, int(ids[bi, i])) for i, t in enumerate(q)]
                    k = [_rope(t, int(ids[bi, i])) for i, t in enumerate(k)]
                for i in range(s):
                    sc = []
                    for j in range(i + 1):
                        e = float(q[i] @ k[j]) / math.sqrt(hd)
                        if m.pe == "alibi":
                            e -= 2.0 ** (-8.0 * (h + 1) / H) * float(ids[bi, i] - ids[bi, j])
                        sc.append(e)
                    w = torch.softmax(torch.tensor(sc, dtype=x.dtype), 0)
                    att[bi, i, sl] = sum(w[j] * v[j] for j in range(i + 1))
        x = x + _lin(att, blk.proj)
        y = _ln(x, blk.ln2)
        x = x + _lin(_gelu(_lin(y, blk.mlp[0])), blk.mlp[2])
    hidden = _ln(x[torch.arange(b), read_pos], m.ln_f)
    return _lin(_gelu(_lin(hidden, m.head[0])), m.head[2]).squeeze(-1)


@pytest.mark.parametrize("pe, own_ids", [("nope", False), ("learned", True), ("alibi", False), ("rope", False),
                                         ("rope", True)])
def test_transformer_is_the_naive_causal_decoder(pe, own_ids):
    torch.manual_seed(1)
    m = SyntheticTransformer(pe=pe, dim=8, num_layers=2, num_heads=2, mlp_ratio=2, max_len=16).double().eval()
    tokens = torch.tensor([[3, 0, 1, 1, 0, 4, 4], [3, 1, 1, 0, 1, 1, 4]])
    read = torch.tensor([5, 6])
    # PoSE-like ids: a jump in the middle (a uniform shift would not tell RoPE's ids from 0..s-1)
    ids = torch.tensor([[0, 1, 2, 9, 10, 11, 0], [0, 1, 5, 6, 7, 8, 9]]) if own_ids else torch.arange(7).expand(2, 7)
    with torch.no_grad():
        got = m(tokens, read, ids if own_ids else None)
        want = _reference(m, tokens, read, ids)
    tol = 1e-6 if pe == "rope" else 1e-9  # torchtune rotates in float32 (its cache and x.float())
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("query", ["eos", "last"])
def test_linear_attention_is_app_c1s_sum(query):
    """y = w^T (1/l) sum_{j<=l} <W_q e(q) + b_q, W_k e(b_j) + b_k> (W_v e(b_j) + b_v) + c, q the read-out token
    (id 2) or the last bit."""
    torch.manual_seed(2)
    m = LinearAttentionModel(dim=4, query=query).double()
    bits = [[1, 0, 0, 1, 1], [0, 1, 1], [1, 0], [0]]
    s = max(map(len, bits)) + 2
    tokens = torch.full((len(bits), s), 4)
    for i, r in enumerate(bits):
        tokens[i, : len(r) + 2] = torch.tensor([3, *r, 4])
    read = torch.tensor([len(r) + 1 for r in bits])
    want = []
    with torch.no_grad():
        for r in bits:
            q = _lin(m.embed.weight[2 if query == "eos" else r[-1]], m.q)
            h = sum(float(q @ _lin(m.embed.weight[t], m.k)) * _lin(m.embed.weight[t], m.v) for t in r) / len(r)
            want.append(float(_lin(h, m.out)))
        torch.testing.assert_close(m(tokens, read), torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)
