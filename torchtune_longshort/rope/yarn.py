"""YaRN (Peng et al. 2024, "YaRN: Efficient context window extension of large language models").

Each dimension pair i has a wavelength; r_i = L / wavelength_i rotations fit in the original context. Pairs
with r_i > beta (fast) are extrapolated (kept), pairs with r_i < alpha (slow) are interpolated (divided by
s), and a linear ramp mixes the two in between (the "NTK-by-parts" rule, Eq. 18-20). Attention logits are
divided by a temperature t with sqrt(1/t) = 0.1 ln s + 1 (Eq. 22), applied as a multiplier on cos and sin so
that q and k both carry its square root, as in the released code and transformers' ``rope_type="yarn"``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from torchtune_longshort.rope.base import ScaledRoPE, default_inv_freq
from torchtune_longshort.rope.checks import (check_factor, check_flag, check_optional_positive, check_positive_int,
                                               check_positive_number, hf_extended_length)


def yarn_mscale(factor: float) -> float:
    """sqrt(1/t) = 0.1 ln(s) + 1 for s > 1, else 1 (YaRN Eq. 22)."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


class YaRNRoPE(ScaledRoPE):
    """YaRN RoPE.

    Args:
        dim, max_seq_len, base, layout: see :class:`ScaledRoPE`.
        factor: s >= 1.
        original_max_seq_len: L, the pre-trained context length.
        alpha: rotations below which a pair is fully interpolated (paper alpha = 1; transformers' ``beta_slow``).
        beta: rotations above which a pair is kept (paper beta = 32; transformers' ``beta_fast``). beta > alpha.
        attention_factor: override of the cos/sin multiplier sqrt(1/t); default ``0.1 ln s + 1``.
        truncate: round the ramp's ends outwards to whole dimensions (transformers' default, True).
    """

    method = "yarn"
    has_factor = True
    scale_parameter = "factor"
    needs_original_length = True
    hf_rope_type = "yarn"

    @classmethod
    def to_hf(cls, spec):
        out = {
            "rope_type": "yarn",
            "factor": float(spec["factor"]),
            "original_max_position_embeddings": int(spec["original_max_seq_len"]),
            "beta_fast": float(spec.get("beta", 32.0)),
            "beta_slow": float(spec.get("alpha", 1.0)),
            "truncate": bool(spec.get("truncate", True)),
        }
        if spec.get("attention_factor") is not None:
            out["attention_factor"] = float(spec["attention_factor"])
        return out

    @classmethod
    def from_hf(cls, entry, theta, max_position_embeddings):
        if entry.get("mscale") or entry.get("mscale_all_dim"):
            raise ValueError("yarn rope_scaling with mscale/mscale_all_dim (DeepSeek form) is not supported here: "
                             "evaluate such a model with lm-eval's --model hf")
        original = int(entry.get("original_max_position_embeddings") or max_position_embeddings)
        spec = {
            "method": "yarn",
            "base": theta,
            "factor": float(entry["factor"]),
            "original_max_seq_len": original,
            "alpha": float(entry.get("beta_slow") or 1.0),
            "beta": float(entry.get("beta_fast") or 32.0),
            "truncate": bool(entry.get("truncate", True)),
            "max_seq_len": hf_extended_length(max_position_embeddings, original, float(entry["factor"])),
        }
        if entry.get("attention_factor") is not None:
            spec["attention_factor"] = float(entry["attention_factor"])
        return spec

    def __init__(
        self,
        dim,
        max_seq_len,
        base=10_000.0,
        *,
        factor: float,
        original_max_seq_len: int,
        alpha: float = 1.0,
        beta: float = 32.0,
        attention_factor: Optional[float] = None,
        truncate: bool = True,
        layout="interleaved",
    ):
        super().__init__(dim, max_seq_len, base, layout)
        self.factor = check_factor("factor", factor)
        self.original_max_seq_len = check_positive_int("original_max_seq_len", original_max_seq_len)
        for name, v in (("alpha", alpha), ("beta", beta)):
            check_positive_number(name, v, "a positive number of rotations")
        if beta <= alpha:
            raise ValueError(
                f"YaRN needs beta > alpha (beta: rotations above which dimensions are kept, alpha: below which they "
                f"are interpolated); got alpha={alpha!r}, beta={beta!r} (paper defaults: alpha=1, beta=32)"
            )
        check_optional_positive("attention_factor", attention_factor)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self._attention_factor = None if attention_factor is None else float(attention_factor)
        self.truncate = check_flag("truncate", truncate)
        self.rope_init()

    @property
    def attention_scaling(self) -> float:
        return self._attention_factor if self._attention_factor is not None else yarn_mscale(self.factor)

    def _correction_dim(self, rotations: float) -> float:
        # The (fractional) dimension index whose wavelength fits `rotations` times into L.
        return self.dim * math.log(self.original_max_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(self.base))

    def ramp_bounds(self):
        low, high = self._correction_dim(self.beta), self._correction_dim(self.alpha)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        return max(low, 0), min(high, self.dim - 1)

    def compute_inv_freq(self, device=None):
        extrapolated = default_inv_freq(self.dim, self.base, device)
        interpolated = extrapolated / self.factor
        low, high = self.ramp_bounds()
        if low == high:
            high += 0.001  # the released code's guard against a zero-width ramp
        ramp = ((torch.arange(self.dim // 2, dtype=torch.float32, device=device) - low) / (high - low)).clamp(0, 1)
        keep = 1 - ramp  # 1: extrapolate (high frequency), 0: interpolate
        return interpolated * (1 - keep) + extrapolated * keep

    def extra_spec(self):
        spec = {
            "factor": self.factor,
            "original_max_seq_len": self.original_max_seq_len,
            "alpha": self.alpha,
            "beta": self.beta,
            "truncate": self.truncate,
        }
        if self._attention_factor is not None:
            spec["attention_factor"] = self._attention_factor
        return spec
