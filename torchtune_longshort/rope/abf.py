"""Adjusted base frequency (ABF; Xiong et al. 2023, "Effective long-context scaling of foundation models") and
entropy-aware ABF (EABF; Zhang et al. 2024, "Extending LLMs' context window with 100 samples").

ABF replaces the RoPE base (10 000 for Llama-2) by a larger one (500 000). EABF keeps ABF's frequencies and
multiplies the *query* at position m by ``max(1, log(m + 1) / log(L))`` (L: the pre-trained context length),
which keeps attention entropy from growing with length; the paper leaves the first two layers unscaled.

torchtune applies one positional module to both q and k, so the query-only factor cannot live in the RoPE
module: :func:`eabf_query_scale` gives the factor and ``torchtune_longshort.models.apply_rope_scaling``
installs it as a hook on each attention's ``q_proj`` (scaling q before its rotation is the same as after:
the rotation is linear).
"""

from __future__ import annotations

import math

import torch

from torchtune_longshort.rope.base import ScaledRoPE, default_inv_freq
from torchtune_longshort.rope.checks import check_base, check_positive_int


def eabf_query_scale(positions: torch.Tensor, original_max_seq_len: int) -> torch.Tensor:
    """EABF's query factor per position: ``max(1, log(pos + 1) / log(L))`` (float32, same shape as ``positions``)."""
    pos = positions.to(torch.float32)
    return (torch.log(pos + 1) / math.log(original_max_seq_len)).clamp_min(1.0)


class ABFRoPE(ScaledRoPE):
    """RoPE with an adjusted base: ``theta_i = new_base^(-2i/d)``.

    Args:
        dim, max_seq_len, base, layout: see :class:`ScaledRoPE` (``base`` is the pre-trained one, kept for the record).
        new_base: the adjusted base (> base; Llama-2 long: 500 000).
    """

    method = "abf"

    @classmethod
    def hf_theta(cls, spec):
        return float(spec["new_base"])  # ABF is plain RoPE with another base: a rope_theta change for transformers

    def __init__(self, dim, max_seq_len, base=10_000.0, *, new_base: float = 500_000.0, layout="interleaved"):
        super().__init__(dim, max_seq_len, base, layout)
        self.new_base = check_base("new_base", new_base)
        self.rope_init()

    def compute_inv_freq(self, device=None):
        return default_inv_freq(self.dim, self.new_base, device)

    def extra_spec(self):
        return {"new_base": self.new_base}


class EABFRoPE(ABFRoPE):
    """ABF frequencies plus EABF's query scaling, which ``apply_rope_scaling`` installs per attention layer.

    Args:
        new_base: see :class:`ABFRoPE`.
        original_max_seq_len: L in ``log(pos + 1) / log(L)`` (Llama-2: 4096).
        exempt_layers: number of leading layers left unscaled (paper: 2). The released patch intends the same
            but, as written, scales every layer; ``exempt_layers=0`` reproduces the released behaviour.
    """

    method = "eabf"
    needs_original_length = True
    transformers_representable = False  # the query factor has no config.json entry in transformers

    def __init__(
        self,
        dim,
        max_seq_len,
        base=10_000.0,
        *,
        new_base: float = 500_000.0,
        original_max_seq_len: int,
        exempt_layers: int = 2,
        layout="interleaved",
    ):
        self_orig = check_positive_int("original_max_seq_len", original_max_seq_len)
        if original_max_seq_len < 2:
            raise ValueError(f"original_max_seq_len={original_max_seq_len!r} is not accepted: log(L) must be > 0")
        if isinstance(exempt_layers, bool) or not isinstance(exempt_layers, int) or exempt_layers < 0:
            raise ValueError(f"exempt_layers={exempt_layers!r} is not accepted: expected an integer >= 0")
        super().__init__(dim, max_seq_len, base, new_base=new_base, layout=layout)
        self.original_max_seq_len = self_orig
        self.exempt_layers = exempt_layers

    def query_scale(self, positions: torch.Tensor, layer_idx: int) -> torch.Tensor | None:
        """Factor for the queries at ``positions`` in layer ``layer_idx``; None where the layer is exempt."""
        if layer_idx < self.exempt_layers:
            return None
        return eabf_query_scale(positions, self.original_max_seq_len)

    def extra_spec(self):
        return {
            "new_base": self.new_base,
            "original_max_seq_len": self.original_max_seq_len,
            "exempt_layers": self.exempt_layers,
        }
