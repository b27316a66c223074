"""Llama-3.1 frequency scaling, computed by torchtune's own ``Llama3ScaledRoPE.apply_scaling``.

The frequencies are exactly torchtune's (``torchtune.models.llama3_1._position_embeddings``); wrapping them in
:class:`ScaledRoPE` adds the length check, the Qwen2 ("half") layout and the common ``spec()``. torchtune is
imported only when a module is built, so the rest of ``rope`` stays framework-free.
"""

from __future__ import annotations

from torchtune_longshort.rope.base import ScaledRoPE, default_inv_freq
from torchtune_longshort.rope.checks import (check_factor, check_positive_int, check_positive_number,
                                               hf_extended_length)


class Llama3RoPE(ScaledRoPE):
    """Llama-3.1 RoPE scaling (wavelength-band interpolation), torchtune's formula.

    Args:
        dim, max_seq_len, base, layout: see :class:`ScaledRoPE`.
        factor: frequency divisor for long wavelengths (Llama-3.1: 8).
        low_freq_factor, high_freq_factor: band edges as fractions of ``original_max_seq_len`` (1 and 4).
        original_max_seq_len: pre-trained context (Llama-3: 8192).
    """

    method = "llama3"
    has_factor = True
    scale_parameter = "factor"
    needs_original_length = True
    hf_rope_type = "llama3"

    @classmethod
    def to_hf(cls, spec):
        return {
            "rope_type": "llama3",
            "factor": float(spec["factor"]),
            "low_freq_factor": float(spec["low_freq_factor"]),
            "high_freq_factor": float(spec["high_freq_factor"]),
            "original_max_position_embeddings": int(spec["original_max_seq_len"]),
        }

    @classmethod
    def from_hf(cls, entry, theta, max_position_embeddings):
        return {
            "method": "llama3",
            "base": theta,
            "factor": float(entry["factor"]),
            "low_freq_factor": float(entry["low_freq_factor"]),
            "high_freq_factor": float(entry["high_freq_factor"]),
            "original_max_seq_len": int(entry["original_max_position_embeddings"]),
            "max_seq_len": hf_extended_length(max_position_embeddings, entry["original_max_position_embeddings"],
                                              entry["factor"]),
        }

    def __init__(
        self,
        dim,
        max_seq_len,
        base=500_000.0,
        *,
        factor: float = 8.0,
        low_freq_factor: float = 1.0,
        high_freq_factor: float = 4.0,
        original_max_seq_len: int = 8192,
        layout="interleaved",
    ):
        super().__init__(dim, max_seq_len, base, layout)
        self.factor = check_factor("factor", factor)
        self.original_max_seq_len = check_positive_int("original_max_seq_len", original_max_seq_len)
        for name, v in (("low_freq_factor", low_freq_factor), ("high_freq_factor", high_freq_factor)):
            check_positive_number(name, v)
        if not low_freq_factor < high_freq_factor:
            raise ValueError(
                f"llama3 needs 0 < low_freq_factor < high_freq_factor; got low_freq_factor={low_freq_factor!r}, "
                f"high_freq_factor={high_freq_factor!r}"
            )
        self.low_freq_factor = float(low_freq_factor)
        self.high_freq_factor = float(high_freq_factor)
        self.rope_init()

    def compute_inv_freq(self, device=None):
        from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE

        freqs = default_inv_freq(self.dim, self.base, device)
        if freqs.is_meta:
            return freqs
        # apply_scaling does not use its instance; calling it unbound reuses torchtune's exact arithmetic.
        return Llama3ScaledRoPE.apply_scaling(
            None, freqs, self.factor, self.low_freq_factor, self.high_freq_factor, self.original_max_seq_len
        )

    def extra_spec(self):
        return {
            "factor": self.factor,
            "low_freq_factor": self.low_freq_factor,
            "high_freq_factor": self.high_freq_factor,
            "original_max_seq_len": self.original_max_seq_len,
        }
