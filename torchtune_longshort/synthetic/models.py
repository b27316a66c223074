"""Models for the synthetic tasks (paper Sec. 3 / App. B, and the theoretical model of App. C.1).

``SyntheticTransformer``: causal decoder-only transformer (pre-LN), a choice of positional encoding, and a
feed-forward head that maps the hidden state at ``<EOS>`` (the last real token) to one real number.

``LinearAttentionModel``: the analysable model of App. C.1: one layer of causal *linear* attention with biases on Q, K
and V whose output at position k is normalized by 1/k, and a linear read-out. It reads the bits only; its query comes
from a fixed read-out token (``query="eos"``, the setting of the closed forms in ``theory.py``) or from the last bit
(``query="last"``).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .tasks import VOCAB_SIZE

POSITIONAL_ENCODINGS = ("nope", "learned", "alibi", "rope")
PE_LABELS = {"nope": "NoPE", "learned": "learned abs.", "alibi": "ALiBi", "rope": "RoPE"}


def check_pe(pe: str) -> None:
    if pe not in POSITIONAL_ENCODINGS:
        raise ValueError(f"pe={pe!r} is unknown; accepted: {', '.join(POSITIONAL_ENCODINGS)}")


def check_sizes(pe: str, dim: int, num_layers: int, num_heads: int) -> None:
    """The sizes a ``SyntheticTransformer`` with ``pe`` accepts, checked before it is built (``RunConfig.validate``
    calls this, so a bad size is refused before any run of a figure trains); raises ``ValueError`` naming the size."""
    check_pe(pe)
    for name, v in (("dim", dim), ("num_layers", num_layers), ("num_heads", num_heads)):
        if v < 1:
            raise ValueError(f"{name}={v} must be >= 1")
    if dim % num_heads:
        raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
    if pe == "alibi" and num_heads & (num_heads - 1):
        raise ValueError(f"num_heads={num_heads}: ALiBi's slopes need a power of 2 heads (1, 2, 4, 8, ...)")
    if pe == "rope" and (dim // num_heads) % 2:
        raise ValueError(f"dim={dim} / num_heads={num_heads} = {dim // num_heads}: RoPE needs an even head dim")


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi head slopes (Press et al. 2022): the geometric sequence 2^(-8 i / n), i = 1..n (n a power of 2)."""
    if num_heads < 1 or num_heads & (num_heads - 1):
        raise ValueError(f"num_heads={num_heads}: ALiBi slopes here need a power of 2")
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / num_heads) for i in range(num_heads)])


def build_rope(head_dim: int, max_seq_len: int) -> nn.Module:
    """RoPE module mapping ``[b, s, h, d] -> [b, s, h, d]`` (interleaved pairs, torchtune layout), cache built for
    ``max_seq_len`` positions.  Uses torchtune's ``RotaryPositionalEmbeddings`` (the only torchtune use in this
    package, imported lazily so the other encodings stay plain PyTorch)."""
    from torchtune.modules import RotaryPositionalEmbeddings

    return RotaryPositionalEmbeddings(dim=head_dim, max_seq_len=max_seq_len)


class _Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: int, pe: str, max_len: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))
        self.rope = build_rope(self.head_dim, max_len) if pe == "rope" else None

    def forward(self, x: torch.Tensor, attn_bias: Optional[torch.Tensor], position_ids: Optional[torch.Tensor]):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.num_heads, self.head_dim).unbind(2)
        if self.rope is not None:
            q = self.rope(q, input_pos=position_ids).to(x.dtype)
            k = self.rope(k, input_pos=position_ids).to(x.dtype)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if attn_bias is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class SyntheticTransformer(nn.Module):
    """Causal decoder-only transformer with a scalar head on the ``<EOS>`` hidden state (paper Sec. 3, App. B).

    Args:
        pe: positional encoding, one of ``POSITIONAL_ENCODINGS`` (``"nope"`` is the paper's default).
        dim, num_layers, num_heads, mlp_ratio: sizes (defaults fit a CPU).
        max_len: longest token sequence (bits + BOS + EOS) the model accepts; learned/RoPE tables are built for it.
        vocab_size: token vocabulary (5 for the paper's tasks).
    Forward:
        ``tokens [b, s]`` long, ``read_pos [b]`` long (index of the token whose hidden state is read, usually EOS;
        ``None`` reads every position, as a language-model head: the output is then ``[b, s, out_dim]``),
        optional ``position_ids [b, s]`` (PoSE-style position ids; default 0..s-1) -> ``[b, out_dim]`` float
        (squeezed to ``[b]`` when ``out_dim == 1``).
    """

    def __init__(
        self,
        pe: str = "nope",
        dim: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        mlp_ratio: int = 4,
        max_len: int = 64,
        vocab_size: int = VOCAB_SIZE,
        out_dim: int = 1,
    ):
        super().__init__()
        check_sizes(pe, dim, num_layers, num_heads)
        if max_len < 1:
            raise ValueError(f"max_len={max_len} must be >= 1")
        self.pe, self.max_len, self.num_heads, self.out_dim = pe, max_len, num_heads, out_dim
        self.embed = nn.Embedding(vocab_size, dim)
        self.pos_embed = nn.Embedding(max_len, dim) if pe == "learned" else None
        if pe == "alibi":
            self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)
        self.blocks = nn.ModuleList(_Block(dim, num_heads, mlp_ratio, pe, max_len) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, out_dim))

    def forward(
        self, tokens: torch.Tensor, read_pos: Optional[torch.Tensor], position_ids: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        b, s = tokens.shape
        pos = position_ids if position_ids is not None else torch.arange(s).expand(b, s)
        if self.pe in ("learned", "rope") and int(pos.max()) >= self.max_len:
            # torchtune's RoPE cache (and our learned table) would index out of range or wrap: fail clearly instead.
            raise ValueError(
                f"position {int(pos.max())} >= max_len={self.max_len} of this {self.pe} model; "
                f"build it with a larger max_len"
            )
        x = self.embed(tokens)
        if self.pos_embed is not None:
            x = x + self.pos_embed(pos)
        bias = None
        if self.pe == "alibi":
            rel = (pos.unsqueeze(2) - pos.unsqueeze(1)).float()  # [b, s, s], i - j
            causal = torch.ones(s, s, dtype=torch.bool).tril()
            bias = -self.slopes.view(1, -1, 1, 1) * rel.unsqueeze(1)
            bias = bias.masked_fill(~causal, float("-inf"))
        for blk in self.blocks:
            x = blk(x, bias, position_ids if self.pe == "rope" else None)
        h = self.ln_f(x if read_pos is None else x[torch.arange(b), read_pos])
        out = self.head(h)
        return out.squeeze(-1) if self.out_dim == 1 else out


class LinearAttentionModel(nn.Module):
    """The theoretical model of the paper's App. C.1: causal linear attention with 1/k normalization and Q/K/V biases.

    With bits ``b_1..b_l`` embedded as ``e(b_j)`` and query token ``q_tok`` (a fixed read-out token for
    ``query="eos"``, the last bit for ``query="last"``), the prediction is

        y_hat = w^T (1/l) sum_{j<=l} <W_q e(q_tok) + b_q, W_k e(b_j) + b_k> (W_v e(b_j) + b_v) + c.

    For ``query="eos"`` every such model equals A + B * mean(b) for some reals A, B (and every A, B is reachable),
    which is what the closed forms in ``theory.py`` use.

    Forward takes the same padded ``<BOS> bits <EOS>`` batch as the transformer: ``tokens [b, s]``, ``read_pos [b]``
    (the EOS index, = l + 1) -> ``[b]``.
    """

    QUERIES = ("eos", "last")

    def __init__(self, dim: int = 8, query: str = "eos"):
        super().__init__()
        if query not in self.QUERIES:
            raise ValueError(f"query={query!r} is unknown; accepted: {', '.join(self.QUERIES)}")
        if dim < 2:
            raise ValueError(f"dim={dim} must be >= 2 (the model needs rank 2 to reach every A + B*mean)")
        self.query = query
        self.embed = nn.Embedding(3, dim)  # bit 0, bit 1, read-out token
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 1)

    def forward(self, tokens: torch.Tensor, read_pos: torch.Tensor, position_ids=None) -> torch.Tensor:
        b, s = tokens.shape
        bits = tokens[:, 1:-1] if s > 2 else tokens[:, :0]
        lengths = read_pos - 1
        valid = torch.arange(bits.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        x = self.embed(torch.where(valid, bits, torch.zeros_like(bits)))  # [b, l, d]
        if self.query == "eos":
            qtok = torch.full((b,), 2, dtype=torch.long)
        else:
            qtok = bits[torch.arange(b), lengths - 1]
        q = self.q(self.embed(qtok))  # [b, d]
        k, v = self.k(x), self.v(x)
        score = torch.einsum("bd,bld->bl", q, k) * valid  # linear attention: no softmax
        h = torch.einsum("bl,bld->bd", score, v) / lengths.unsqueeze(1).to(v.dtype)
        return self.out(h).squeeze(-1)
