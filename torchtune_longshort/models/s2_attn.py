"""Shifted sparse attention (S2-Attn; Chen et al. 2024, "LongLoRA", Sec. 3.2) as a training-time option.

The sequence is cut into groups of G tokens and attention is causal *within* a group. Half of the heads use
groups shifted by G/2, so information flows across group boundaries. At evaluation the model uses full
attention (LongLoRA's design: S2-Attn only during fine-tuning).

The shift here has no wrap-around. LongLoRA's non-flash code rolls q/k/v by G/2, which puts the first G/2 tokens
at the end of the last group where the causal mask lets them attend to the last G/2 tokens of the sequence (a
leak of the future). Here the shifted heads' groups are ``[0, G/2)``, ``[G/2, 3G/2)``, ..., ``[s - G/2, s)``:
each is plain causal attention (no roll, no explicit mask, so SDPA may use its fused kernels): the groups of
LongLoRA's flash-attention code (``forward_flashattn``'s ``cu_seqlens``). With a single group (G = s) there is no
boundary to straddle and both halves use full causal attention.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)


def _check_group(seq_len: int, group_size: int) -> None:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2 or group_size % 2:
        raise ValueError(f"S2-Attn group_size={group_size!r} is not accepted: expected an even integer >= 2")
    if seq_len % group_size:
        raise ValueError(
            f"S2-Attn needs the sequence length to be a multiple of the group size: seq_len={seq_len}, "
            f"group_size={group_size}"
        )


def _causal_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
    """Causal attention over [..., L, d] blocks: leading dims flattened into a 4-D batch so that SDPA can use
    its fused CPU/GPU kernels (they take 4-D inputs; 5-D ones fall back to the materialising math path)."""
    lead, L, d = q.shape[:-2], q.shape[-2], q.shape[-1]
    out = F.scaled_dot_product_attention(
        q.reshape(-1, 1, L, d), k.reshape(-1, 1, L, d), v.reshape(-1, 1, L, d), dropout_p=dropout_p, is_causal=True
    )
    return out.reshape(*lead, L, d)


def s2_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group_size: int, dropout_p: float = 0.0
) -> torch.Tensor:
    """Shifted sparse causal attention.

    Args:
        q, k, v: [b, h, s, d] (k/v already expanded to h heads); heads ``h//2 ..`` use the shifted groups.
        group_size: G, even, dividing s.
        dropout_p: attention dropout.

    Returns:
        [b, h, s, d]. Query i of an unshifted head attends to keys j <= i with ``j // G == i // G``; of a
        shifted head, to keys j <= i with ``(j + G/2) // G == (i + G/2) // G``.
    """
    b, h, s, d = q.shape
    _check_group(s, group_size)
    n = s // group_size
    if n == 1:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    g, half, h1 = group_size, group_size // 2, h // 2

    def grouped(x):  # [b, h', s, d] -> [b, h', n, G, d]
        return x.reshape(x.shape[0], x.shape[1], n, g, d)

    outs = []
    if h1:
        o = _causal_blocks(grouped(q[:, :h1]), grouped(k[:, :h1]), grouped(v[:, :h1]), dropout_p)
        outs.append(o.reshape(b, h1, s, d))
    # Shifted heads: groups [0, G/2), [G/2, 3G/2), ..., [s - G/2, s). The n - 1 full groups in the middle and
    # the two half groups at the ends are each plain causal attention, so no explicit mask is needed and SDPA
    # may use its fused kernels (a mask would force the [G, G] score matrices to be materialised).
    qs, ks, vs = (x[:, h1:] for x in (q, k, v))
    hs = h - h1
    mid = slice(half, s - half)
    o_mid = _causal_blocks(*(x[:, :, mid].reshape(b, hs, n - 1, g, d) for x in (qs, ks, vs)), dropout_p)
    o_mid = o_mid.reshape(b, hs, s - g, d)
    ends = [torch.stack([x[:, :, :half], x[:, :, s - half :]], dim=2) for x in (qs, ks, vs)]  # [b, hs, 2, G/2, d]
    o_ends = _causal_blocks(*ends, dropout_p)
    outs.append(torch.cat([o_ends[:, :, 0], o_mid, o_ends[:, :, 1]], dim=2))
    return torch.cat(outs, dim=1)


def s2_group_size(seq_len: int, group_size: Optional[int], group_size_ratio: Optional[float]) -> int:
    """The group size for a sequence: ``group_size`` if given, else ``int(seq_len * group_size_ratio)``."""
    if group_size is not None:
        return group_size
    return max(2, int(seq_len * group_size_ratio))


def check_s2_settings(group_size: Optional[int], group_size_ratio: Optional[float], where: str = "model") -> None:
    """Refuse an S2-Attn ``s2_group_size`` that is not an even integer >= 2, or (without one) an
    ``s2_group_size_ratio`` outside (0, 1]; ``where`` is the model node's config path."""
    if group_size is None:
        r = group_size_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not (0 < r <= 1):
            raise ValueError(f"{where}.s2_group_size_ratio={r!r} is not accepted: expected a number in (0, 1] "
                             "(LongLoRA: 0.25)")
    elif isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2 or group_size % 2:
        raise ValueError(f"{where}.s2_group_size={group_size!r} is not accepted: expected an even integer >= 2, or "
                         f"null to use {where}.s2_group_size_ratio")


def _fits(seq_len: int, group_size: Optional[int], group_size_ratio: Optional[float]) -> bool:
    g = group_size if group_size is not None else int(seq_len * group_size_ratio)
    return g >= 2 and g % 2 == 0 and seq_len % g == 0


def check_s2_length(seq_len: int, group_size: Optional[int], group_size_ratio: Optional[float],
                    where: str = "model", length_key: str = "seq_len") -> None:
    """Refuse a training length ``seq_len`` (the config's ``length_key``) whose S2-Attn groups are not even or do
    not divide it (LongLoRA refuses ``q_len % group_size`` too): said before the run starts, not at its first
    forward. The message names the nearest lengths that fit."""
    check_s2_settings(group_size, group_size_ratio, where)
    if _fits(seq_len, group_size, group_size_ratio):
        return
    below = next((n for n in range(seq_len - 1, 1, -1) if _fits(n, group_size, group_size_ratio)), None)
    above = next((n for n in range(seq_len + 1, 2 * seq_len + 64) if _fits(n, group_size, group_size_ratio)), None)
    near = " or ".join(str(n) for n in (below, above) if n is not None)
    divisors = sorted((g for g in range(2, seq_len + 1, 2) if seq_len % g == 0),
                      key=lambda g: abs(g - (group_size or seq_len * group_size_ratio)))[:2]
    other = f"{where}.s2_group_size to an even divisor of {seq_len} (e.g. {' or '.join(map(str, divisors))})" \
        if divisors else f"an even {length_key}"
    if group_size is not None:
        raise ValueError(f"{where}.s2_group_size={group_size} does not divide {length_key}={seq_len}: S2-Attn cuts "
                         f"each window into groups of that many tokens; set {length_key} to a multiple of "
                         f"{group_size} ({near}), or {other}")
    g = int(seq_len * group_size_ratio)
    to = f"set {length_key} to {near}, or " if near else "set "
    raise ValueError(f"{where}.s2_group_size_ratio={group_size_ratio} gives S2-Attn groups of int({seq_len} x "
                     f"{group_size_ratio}) = {g} tokens at {length_key}={seq_len}; a group must be even (the shifted "
                     f"heads move by half a group) and divide the length (LongLoRA's rule); {to}{other}")


def enable_s2_attn(model: nn.Module, group_size: Optional[int] = None,
                   group_size_ratio: Optional[float] = 0.25) -> nn.Module:
    """Use S2-Attn in every attention of a torchtune decoder while it is in training mode.

    Args:
        model: a torchtune ``TransformerDecoder`` (any family; LoRA/QLoRA included).
        group_size: fixed group size G (even, dividing the training length), or None to use the ratio.
        group_size_ratio: G = int(seq_len * ratio) per batch (LongLoRA: 1/4). Ignored when ``group_size`` is set.

    Returns:
        ``model``, with ``model.s2_attn`` recording the setting. Eval mode, KV-cache decoding and calls with an
        explicit mask (packed sequences) use the original full attention.
    """
    from torchtune.modules import MultiHeadAttention

    check_s2_settings(group_size, group_size_ratio)
    disable_s2_attn(model)
    count = 0
    for m in model.modules():
        if not isinstance(m, MultiHeadAttention):
            continue
        original = m._attention_call

        def call(q, k, v, mask, dropout_p, is_causal, attn=m, original=original):
            if attn.training and is_causal and mask is None:
                g = s2_group_size(q.shape[2], group_size, group_size_ratio)
                return s2_attention(q, k, v, g, dropout_p)
            if attn.training and mask is not None:
                log.warning("S2-Attn: a mask was given (packed sequences?); using full attention for this call")
            return original(q, k, v, mask=mask, dropout_p=dropout_p, is_causal=is_causal)

        m._s2_original_attention_call = original
        m._attention_call = call
        count += 1
    if not count:
        raise ValueError(f"enable_s2_attn: model of type {type(model).__name__} has no torchtune MultiHeadAttention")
    model.s2_attn = {"group_size": group_size, "group_size_ratio": None if group_size else group_size_ratio}
    return model


def disable_s2_attn(model: nn.Module) -> nn.Module:
    """Undo :func:`enable_s2_attn` (no-op where it was not enabled)."""
    for m in model.modules():
        original = m.__dict__.pop("_s2_original_attention_call", None)
        if original is not None:
            m._attention_call = original
    if hasattr(model, "s2_attn"):
        del model.s2_attn
    return model
