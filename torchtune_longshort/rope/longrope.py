"""LongRoPE (Ding et al. 2024, "LongRoPE: Extending LLM context window beyond 2 million tokens"), as Phi-3-mini-128k,
Phi-3.5-mini and Phi-4-mini run it (the last rotates part of each head, which torchtune's phi3 builder does not).

Each rotated pair i has its own divisor of the inverse frequency, found by the paper's search: ``theta_i =
base^(-2i/d) / lambda_i``. A model ships two such lists, ``short_factor`` and ``long_factor`` (d/2 entries each),
and picks one per forward from the length of the call, ``L_cur = max(position) + 1``: the long factors when
``L_cur > L`` (L: ``original_max_seq_len``, the pre-trained length; at ``L_cur = L`` the short ones), the short ones
otherwise. cos and sin are multiplied by ``sqrt(1 + ln s / ln L)`` (s: the extension factor ``L'/L``; 1 when s <= 1)
unless ``attention_factor`` is given. This is transformers' ``rope_type="longrope"`` (5.23,
``_compute_longrope_parameters`` and ``dynamic_rope_update``): one switch for the whole call, every position of it.

Generation with a KV cache follows transformers' ``Phi3ForCausalLM`` (``prepare_inputs_for_generation``): a prompt run
in chunks takes the factors of its whole length (:meth:`LongRoPE.sequence_length`), and the cache, written with the
short factors while the sequence was at most L long, is recomputed with the long ones when the sequence first passes L
(:meth:`LongRoPE.kv_cache_stale`); each step then equals one full forward over the sequence. A caller that keeps the
cache (transformers' ``LlamaForCausalLM``) gets keys with the factors they were written with.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from torchtune_longshort.rope.base import ScaledRoPE, rope_cache
from torchtune_longshort.rope.checks import (check_factor, check_optional_positive, check_positive_int,
                                               hf_extended_length)


def check_factor_list(name: str, values, dim: int) -> list:
    """``values`` must be ``dim // 2`` finite positive numbers (one divisor per rotated pair); the error names
    ``name``, the number of entries given and the number needed."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name}={values!r} is not accepted: expected a list of {dim // 2} positive numbers "
                         f"(head_dim/2 for head_dim {dim})")
    if len(values) != dim // 2:
        raise ValueError(f"{name} has {len(values)} entries, but head_dim {dim} needs {dim // 2} (head_dim/2: one "
                         f"divisor per rotated pair of dimensions): give {dim // 2} factors")
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
           or v <= 0]
    if bad:
        raise ValueError(f"{name} holds {bad[0]!r}: expected finite numbers > 0 (divisors of the inverse frequencies)")
    return [float(v) for v in values]


def longrope_attention_factor(factor: float, original_max_seq_len: int) -> float:
    """The cos/sin multiplier LongRoPE's authors recommend: ``sqrt(1 + ln s / ln L)`` for s > 1, else 1."""
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original_max_seq_len))


class LongRoPE(ScaledRoPE):
    """LongRoPE: per-pair frequency divisors, short or long by the length of the call, and an attention factor.

    Args:
        dim, max_seq_len, base, layout: see :class:`ScaledRoPE` (Phi-3's torchtune RoPE: ``"half"``).
        short_factor: ``dim / 2`` divisors used while ``max(position) + 1 <= original_max_seq_len``.
        long_factor: ``dim / 2`` divisors used beyond it.
        original_max_seq_len: L, the pre-trained length and the switch (Phi-3.5-mini: 4096).
        factor: s >= 1, the extension factor the default attention factor is computed from (transformers: the
            config's ``factor``, else ``max_position_embeddings / original_max_position_embeddings``).
        attention_factor: the cos/sin multiplier; default ``sqrt(1 + ln s / ln L)`` (1 for s = 1).
    """

    method = "longrope"
    length_dependent = True
    has_factor = True
    scale_parameter = "factor"
    needs_original_length = True
    hf_rope_type = "longrope"
    hf_rope_type_aliases = ("su",)  # Phi-3-mini-128k's first config.json; transformers' Phi3Config renames it
    # transformers' Phi3Config reads the switch from the top level of config.json (default 4096), not rope_scaling.
    hf_top_level_keys = ("original_max_position_embeddings",)

    @classmethod
    def to_hf(cls, spec):
        # ``factor`` is written although Phi-3's hub configs leave it out (transformers then takes it from
        # max_position_embeddings): the attention factor then does not change with the cache length we save.
        out = {
            "rope_type": "longrope",
            "short_factor": [float(v) for v in spec["short_factor"]],
            "long_factor": [float(v) for v in spec["long_factor"]],
            "factor": float(spec["factor"]),
            "original_max_position_embeddings": int(spec["original_max_seq_len"]),
        }
        if spec.get("attention_factor") is not None:
            out["attention_factor"] = float(spec["attention_factor"])
        return out

    @classmethod
    def from_hf(cls, entry, theta, max_position_embeddings):
        original = int(entry.get("original_max_position_embeddings") or max_position_embeddings)
        factor = entry.get("factor")
        spec_factor = float(factor) if factor is not None else max_position_embeddings / original
        spec = {
            "method": "longrope",
            "base": theta,
            "short_factor": list(entry["short_factor"]),
            "long_factor": list(entry["long_factor"]),
            "original_max_seq_len": original,
            "factor": spec_factor,
            "max_seq_len": hf_extended_length(max_position_embeddings, original, spec_factor),
        }
        if entry.get("attention_factor") is not None:
            spec["attention_factor"] = float(entry["attention_factor"])
        return spec

    @classmethod
    def check_spec(cls, spec, head_dim, where="rope spec"):
        for name in ("short_factor", "long_factor"):
            check_factor_list(f"{where}.{name}", spec.get(name), head_dim)

    def __init__(
        self,
        dim,
        max_seq_len,
        base=10_000.0,
        *,
        short_factor: Sequence[float],
        long_factor: Sequence[float],
        original_max_seq_len: int,
        factor: float,
        attention_factor: Optional[float] = None,
        layout="interleaved",
    ):
        super().__init__(dim, max_seq_len, base, layout)
        self.short_factor = check_factor_list("short_factor", short_factor, self.dim)
        self.long_factor = check_factor_list("long_factor", long_factor, self.dim)
        self.original_max_seq_len = check_positive_int("original_max_seq_len", original_max_seq_len)
        if original_max_seq_len < 2:  # the default attention factor divides by ln L
            raise ValueError(f"original_max_seq_len={original_max_seq_len!r} is not accepted: expected the "
                             "pre-trained length, an integer >= 2")
        self.factor = check_factor("factor", factor)
        check_optional_positive("attention_factor", attention_factor)
        self._attention_factor = None if attention_factor is None else float(attention_factor)
        self.rope_init()

    @property
    def attention_scaling(self) -> float:
        if self._attention_factor is not None:
            return self._attention_factor
        return longrope_attention_factor(self.factor, self.original_max_seq_len)

    def inv_freq(self, factors, device=None) -> torch.Tensor:
        """``1 / (lambda_i * base^(2i/d))``, float32, in transformers' order of operations (bit-equal to it)."""
        ext = torch.tensor(factors, dtype=torch.float32, device=device)
        exponent = torch.arange(0, self.dim, 2, dtype=torch.int64, device=device).float() / self.dim
        return 1.0 / (ext * self.base**exponent)

    def compute_inv_freq(self, device=None):
        return self.inv_freq(self.short_factor, device)  # ``theta``: the short factors (transformers' inv_freq)

    def build_rope_cache(self, max_seq_len: int) -> None:
        """``cache`` (short factors) and ``long_cache``, each [max_seq_len, dim/2, 2], times the attention factor."""
        super().build_rope_cache(max_seq_len)
        long_theta = self.inv_freq(self.long_factor, self.theta.device)
        self.register_buffer("long_cache", rope_cache(long_theta, max_seq_len, self.attention_scaling),
                             persistent=False)

    def uses_long_factors(self, length: int) -> bool:
        """Whether a sequence of ``length`` positions runs on the long factors (strictly past L)."""
        return length > self.original_max_seq_len

    def kv_cache_stale(self, cached, length):
        # transformers' Phi3ForCausalLM.prepare_inputs_for_generation: keys written while the sequence was at most L
        # long carry the short factors; the first step past L recomputes them (past_length <= L < input length).
        return 0 < cached and not self.uses_long_factors(cached) and self.uses_long_factors(length)

    def cos_sin(self, seq_len, input_pos):
        if not self.is_cache_built:
            raise RuntimeError(f"{type(self).__name__}: RoPE cache is not built; call rope_init() first")
        length = self.declared_length(seq_len, input_pos)
        if input_pos is None:
            long = self.uses_long_factors(seq_len if length is None else length)
            rows = (self.long_cache if long else self.cache)[:seq_len]
        elif input_pos.numel() == 0:
            rows = self.cache[input_pos]
        elif length is not None:
            rows = (self.long_cache if self.uses_long_factors(length) else self.cache)[input_pos]
        else:
            # One switch for the call, from its largest position (transformers' rule); a tensor condition, so
            # that a compiled layer takes it without a graph break.
            long = input_pos.max() + 1 > self.original_max_seq_len
            rows = torch.where(long, self.long_cache[input_pos], self.cache[input_pos])
        rows = rows.view(-1, seq_len, 1, self.dim // 2, 2)
        return rows[..., 0], rows[..., 1]

    def extra_spec(self):
        spec = {
            "short_factor": list(self.short_factor),
            "long_factor": list(self.long_factor),
            "factor": self.factor,
            "original_max_seq_len": self.original_max_seq_len,
        }
        if self._attention_factor is not None:
            spec["attention_factor"] = self._attention_factor
        return spec
