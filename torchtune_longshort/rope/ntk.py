"""NTK-aware scaling (bloc97, 2023) and its dynamic variant (emozilla, 2023).

NTK-aware: keep the highest frequency and stretch the lowest by the factor s, which amounts to a new base
``base * s^(d/(d-2))``. Dynamic NTK recomputes that base from the length of the current sequence,
``base * (s * L_cur / L - (s - 1))^(d/(d-2))`` for ``L_cur > L`` and the original base otherwise (the rule of
transformers' ``rope_type="dynamic"``).
"""

from __future__ import annotations

from typing import Optional

import torch

from torchtune_longshort.rope.base import ScaledRoPE, default_inv_freq
from torchtune_longshort.rope.checks import check_factor, check_positive_int


class NTKRoPE(ScaledRoPE):
    """Static NTK-aware RoPE: base' = base * factor^(dim / (dim - 2)).

    Args:
        dim, max_seq_len, base, layout: see :class:`ScaledRoPE`.
        factor: s >= 1.
    """

    method = "ntk"
    has_factor = True
    scale_parameter = "factor"

    @classmethod
    def hf_theta(cls, spec):
        # Static NTK is plain RoPE with base * s^(d/(d-2)): transformers runs it as a rope_theta change.
        if "head_dim" not in spec:
            raise ValueError("an ntk spec needs 'head_dim' to write its scaled base into config.json")
        d = spec["head_dim"]
        return float(spec["base"]) * float(spec["factor"]) ** (d / (d - 2))

    def __init__(self, dim, max_seq_len, base=10_000.0, *, factor: float, layout="interleaved"):
        super().__init__(dim, max_seq_len, base, layout)
        if self.dim == 2:
            raise ValueError("head_dim=2 is not accepted for ntk: the exponent dim/(dim-2) is undefined")
        self.factor = check_factor("factor", factor)
        self.rope_init()

    @property
    def scaled_base(self) -> float:
        return self.base * self.factor ** (self.dim / (self.dim - 2))

    def compute_inv_freq(self, device=None):
        return default_inv_freq(self.dim, self.scaled_base, device)

    def extra_spec(self):
        return {"factor": self.factor}


class DynamicNTKRoPE(ScaledRoPE):
    """Dynamic NTK: the base follows the current length ``L_cur = max(position) + 1``.

    ``L_cur <= original_max_seq_len`` uses the plain base (and the cache); beyond, the base is
    ``base * (factor * L_cur / L - (factor - 1))^(d/(d-2))`` and cos/sin are computed for this call. With a KV
    cache, keys keep the base they were written with (as in transformers): decoding past ``L`` therefore differs
    from a full forward pass over the same prefix, by design of the method.

    Args:
        dim, max_seq_len, base, layout: see :class:`ScaledRoPE`.
        factor: s >= 1.
        original_max_seq_len: L, the pre-trained context length.
    """

    method = "dynamic_ntk"
    length_dependent = True
    has_factor = True
    scale_parameter = "factor"
    needs_original_length = True
    hf_rope_type = "dynamic"

    @classmethod
    def hf_max_position_embeddings(cls, spec):
        return int(spec["original_max_seq_len"])  # transformers reads the *original* length from this key

    @classmethod
    def to_hf(cls, spec):
        return {"rope_type": "dynamic", "factor": float(spec["factor"])}

    @classmethod
    def from_hf(cls, entry, theta, max_position_embeddings):
        factor = float(entry["factor"])
        return {"method": "dynamic_ntk", "base": theta, "factor": factor,
                "original_max_seq_len": max_position_embeddings,
                "max_seq_len": int(round(max_position_embeddings * factor))}

    def __init__(self, dim, max_seq_len, base=10_000.0, *, factor: float, original_max_seq_len: int,
                 layout="interleaved"):
        super().__init__(dim, max_seq_len, base, layout)
        if self.dim == 2:
            raise ValueError("head_dim=2 is not accepted for dynamic_ntk: the exponent dim/(dim-2) is undefined")
        self.factor = check_factor("factor", factor)
        self.original_max_seq_len = check_positive_int("original_max_seq_len", original_max_seq_len)
        self._dyn_key: Optional[tuple] = None
        self._dyn_theta: Optional[torch.Tensor] = None
        self.rope_init()

    def base_for_length(self, length: int) -> float:
        """The base used for a sequence of ``length`` tokens."""
        if length <= self.original_max_seq_len:
            return self.base
        ratio = self.factor * length / self.original_max_seq_len - (self.factor - 1)
        return self.base * ratio ** (self.dim / (self.dim - 2))

    def extra_spec(self):
        return {"factor": self.factor, "original_max_seq_len": self.original_max_seq_len}

    def cos_sin(self, seq_len, input_pos):
        length = self.call_length(seq_len, input_pos)
        if length <= self.original_max_seq_len:
            return super().cos_sin(seq_len, input_pos)
        key = (length, self.cache.device)
        if self._dyn_key != key:
            # q and k of every layer share the length: compute the frequencies once per length.
            self._dyn_theta = default_inv_freq(self.dim, self.base_for_length(length), self.cache.device)
            self._dyn_key = key
        pos = torch.arange(seq_len, device=self.cache.device) if input_pos is None else input_pos
        angles = pos.to(torch.float32)[..., None] * self._dyn_theta
        angles = angles.view(-1, seq_len, 1, self.dim // 2)
        return angles.cos(), angles.sin()
