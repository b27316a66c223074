"""Llama-2 builders with a chosen RoPE scaling, in full, LoRA and QLoRA (NF4 via torchao) forms, with LongLoRA's
S2-Attn as a training-time option. Each builds torchtune's own model (``llama2`` / ``lora_llama2``) at the
pre-trained context, then calls :func:`apply_rope_scaling` (and :func:`enable_s2_attn`), so a checkpoint loads
with torchtune's checkpointers unchanged.

LongQLoRA (Yang 2023) is :func:`longqlora_llama2_7b`: PI with factor ``ceil(L'/L)``, NF4 base weights (torchao's
NF4 quantizes its per-block scales again: QLoRA's double quantization), LoRA r=64, alpha=16, dropout 0.05 on every
linear layer but the output, S2-Attn with group 1/4 of the length; embeddings and norms frozen unless
:func:`longqlora_trainable_params` is asked to train them (LongLoRA trains them).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Dict, List, Optional

from torch import nn

from torchtune_longshort.models.rope_scaling import apply_rope_scaling, default_pi_factor
from torchtune_longshort.rope import DEFAULT_ROPE_METHOD
from torchtune_longshort.models.s2_attn import enable_s2_attn

LLAMA2_CONTEXT = 4096
LLAMA2_7B = dict(vocab_size=32_000, num_layers=32, num_heads=32, num_kv_heads=32, embed_dim=4096, intermediate_dim=11008)
LLAMA2_13B = dict(vocab_size=32_000, num_layers=40, num_heads=40, num_kv_heads=40, embed_dim=5120, intermediate_dim=13824)
ALL_ATTN = ["q_proj", "k_proj", "v_proj", "output_proj"]


def _finish(model, max_seq_len, original_max_seq_len, rope_method, rope_kwargs, rope_base, s2_attn, s2_group_size,
            s2_group_size_ratio):
    apply_rope_scaling(model, rope_method, max_seq_len, original_max_seq_len=original_max_seq_len, base=rope_base,
                       **dict(rope_kwargs or {}))
    if s2_attn:
        enable_s2_attn(model, group_size=s2_group_size, group_size_ratio=s2_group_size_ratio)
    return model


def llama2_longshort(
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    max_seq_len: int,
    *,
    original_max_seq_len: int = LLAMA2_CONTEXT,
    rope_method: str = DEFAULT_ROPE_METHOD,
    rope_kwargs: Optional[Dict[str, Any]] = None,
    rope_base: float = 10_000.0,
    intermediate_dim: Optional[int] = None,
    attn_dropout: float = 0.0,
    norm_eps: float = 1e-5,
    s2_attn: bool = False,
    s2_group_size: Optional[int] = None,
    s2_group_size_ratio: float = 0.25,
):
    """A torchtune Llama-2 of any size with RoPE scaling ``rope_method`` to ``max_seq_len``.

    Args:
        vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, attn_dropout, norm_eps:
            as torchtune's ``llama2``.
        max_seq_len: target context L'.
        original_max_seq_len: pre-trained context L (Llama-2: 4096).
        rope_method, rope_kwargs: a ``ROPE_METHODS`` name and its parameters (defaults: factor L'/L, ...).
        rope_base: the pre-trained RoPE base.
        s2_attn, s2_group_size, s2_group_size_ratio: LongLoRA's S2-Attn at training time (see ``enable_s2_attn``).

    Returns:
        a ``TransformerDecoder`` with ``.rope_scaling`` (and ``.s2_attn`` if enabled).
    """
    from torchtune.models.llama2 import llama2

    model = llama2(vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
                   embed_dim=embed_dim, max_seq_len=original_max_seq_len, attn_dropout=attn_dropout,
                   intermediate_dim=intermediate_dim, norm_eps=norm_eps, rope_base=rope_base)
    return _finish(model, max_seq_len, original_max_seq_len, rope_method, rope_kwargs, rope_base, s2_attn,
                   s2_group_size, s2_group_size_ratio)


def lora_llama2_longshort(
    lora_attn_modules: List[str],
    apply_lora_to_mlp: bool = False,
    apply_lora_to_output: bool = False,
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    max_seq_len: int,
    lora_rank: int,
    lora_alpha: float,
    lora_dropout: float = 0.0,
    use_dora: bool = False,
    quantize_base: bool = False,
    original_max_seq_len: int = LLAMA2_CONTEXT,
    rope_method: str = DEFAULT_ROPE_METHOD,
    rope_kwargs: Optional[Dict[str, Any]] = None,
    rope_base: float = 10_000.0,
    intermediate_dim: Optional[int] = None,
    attn_dropout: float = 0.0,
    norm_eps: float = 1e-5,
    s2_attn: bool = False,
    s2_group_size: Optional[int] = None,
    s2_group_size_ratio: float = 0.25,
):
    """torchtune's ``lora_llama2`` (``quantize_base=True``: QLoRA, NF4 base weights) with RoPE scaling and S2-Attn.

    LoRA arguments are torchtune's; the rest as :func:`llama2_longshort`. Note torchtune's ``lora_llama2`` has no
    ``rope_base`` argument: the base is set here by the RoPE swap.
    """
    from torchtune.models.llama2 import lora_llama2

    model = lora_llama2(lora_attn_modules, apply_lora_to_mlp, apply_lora_to_output, vocab_size=vocab_size,
                        num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads, embed_dim=embed_dim,
                        max_seq_len=original_max_seq_len, intermediate_dim=intermediate_dim,
                        attn_dropout=attn_dropout, norm_eps=norm_eps, lora_rank=lora_rank, lora_alpha=lora_alpha,
                        lora_dropout=lora_dropout, use_dora=use_dora, quantize_base=quantize_base)
    return _finish(model, max_seq_len, original_max_seq_len, rope_method, rope_kwargs, rope_base, s2_attn,
                   s2_group_size, s2_group_size_ratio)


def llama2_7b_longshort(max_seq_len: int = 8192, rope_method: str = DEFAULT_ROPE_METHOD, rope_kwargs=None, **kwargs):
    """Llama-2-7B (4k pre-trained) with RoPE scaling to ``max_seq_len``; ``kwargs`` as :func:`llama2_longshort`."""
    return llama2_longshort(**LLAMA2_7B, max_seq_len=max_seq_len, rope_method=rope_method, rope_kwargs=rope_kwargs,
                            **kwargs)


def llama2_13b_longshort(max_seq_len: int = 8192, rope_method: str = DEFAULT_ROPE_METHOD, rope_kwargs=None, **kwargs):
    """Llama-2-13B (4k pre-trained) with RoPE scaling to ``max_seq_len``."""
    return llama2_longshort(**LLAMA2_13B, max_seq_len=max_seq_len, rope_method=rope_method, rope_kwargs=rope_kwargs,
                            **kwargs)


def lora_llama2_7b_longshort(
    lora_attn_modules: List[str] = tuple(ALL_ATTN),
    apply_lora_to_mlp: bool = True,
    apply_lora_to_output: bool = False,
    *,
    max_seq_len: int = 8192,
    lora_rank: int = 8,
    lora_alpha: float = 16,
    **kwargs,
):
    """LoRA Llama-2-7B with RoPE scaling (``quantize_base=True`` for QLoRA); ``kwargs`` as :func:`lora_llama2_longshort`."""
    return lora_llama2_longshort(list(lora_attn_modules), apply_lora_to_mlp, apply_lora_to_output, **LLAMA2_7B,
                                 max_seq_len=max_seq_len, lora_rank=lora_rank, lora_alpha=lora_alpha, **kwargs)


def lora_llama2_13b_longshort(
    lora_attn_modules: List[str] = tuple(ALL_ATTN),
    apply_lora_to_mlp: bool = True,
    apply_lora_to_output: bool = False,
    *,
    max_seq_len: int = 8192,
    lora_rank: int = 8,
    lora_alpha: float = 16,
    **kwargs,
):
    """LoRA Llama-2-13B with RoPE scaling."""
    return lora_llama2_longshort(list(lora_attn_modules), apply_lora_to_mlp, apply_lora_to_output, **LLAMA2_13B,
                                 max_seq_len=max_seq_len, lora_rank=lora_rank, lora_alpha=lora_alpha, **kwargs)


qlora_llama2_7b_longshort = partial(lora_llama2_7b_longshort, quantize_base=True)
qlora_llama2_7b_longshort.__doc__ = "QLoRA (NF4 base) Llama-2-7B with RoPE scaling: lora_llama2_7b_longshort(quantize_base=True)."
qlora_llama2_13b_longshort = partial(lora_llama2_13b_longshort, quantize_base=True)
qlora_llama2_13b_longshort.__doc__ = "QLoRA (NF4 base) Llama-2-13B with RoPE scaling."


def longqlora_llama2(
    *,
    max_seq_len: int,
    original_max_seq_len: int = LLAMA2_CONTEXT,
    lora_rank: int = 64,
    lora_alpha: float = 16,
    lora_dropout: float = 0.05,
    s2_attn: bool = True,
    s2_group_size_ratio: float = 0.25,
    quantize_base: bool = True,
    dims: Optional[Dict[str, int]] = None,
    **kwargs,
):
    """LongQLoRA (Yang 2023): PI with factor ``ceil(L'/L)`` + QLoRA (NF4, double-quantized scales) + S2-Attn,
    LoRA on q/k/v/o and the MLP (all linears but the output). ``dims`` defaults to Llama-2-7B's."""
    rope_kwargs = {"factor": float(default_pi_factor(max_seq_len, original_max_seq_len))}
    return lora_llama2_longshort(ALL_ATTN, True, False, **(dims or LLAMA2_7B), max_seq_len=max_seq_len,
                                 lora_rank=lora_rank, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                                 quantize_base=quantize_base, original_max_seq_len=original_max_seq_len,
                                 rope_method=DEFAULT_ROPE_METHOD, rope_kwargs=rope_kwargs, s2_attn=s2_attn,
                                 s2_group_size_ratio=s2_group_size_ratio, **kwargs)


def longqlora_llama2_7b(max_seq_len: int = 8192, **kwargs):
    """LongQLoRA on Llama-2-7B (the paper's setting: 4k -> 8k)."""
    return longqlora_llama2(max_seq_len=max_seq_len, dims=LLAMA2_7B, **kwargs)


def longqlora_trainable_params(
    model: nn.Module, train_embeddings: bool = False, train_norms: bool = False
) -> Dict[str, nn.Parameter]:
    """Parameters to train in LongQLoRA/LongLoRA: the LoRA adapters, learnable RoPE parameters (CLEX), and
    optionally the token embeddings and every RMSNorm (LongLoRA trains them; LongQLoRA freezes them).

    Use with torchtune: ``set_trainable_params(model, longqlora_trainable_params(model, True, True))``.
    """
    from torchtune.modules import RMSNorm
    from torchtune.modules.peft import get_adapter_params

    params = dict(get_adapter_params(model))
    for name, p in model.named_parameters():
        if ".pos_embeddings." in name:
            params[name] = p
    if train_embeddings:
        params.update({f"tok_embeddings.{n}": p for n, p in model.tok_embeddings.named_parameters()})
    if train_norms:
        for mname, m in model.named_modules():
            if isinstance(m, RMSNorm):
                params.update({f"{mname}.{n}": p for n, p in m.named_parameters()})
    return params
