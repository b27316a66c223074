"""Position Interpolation (Chen et al. 2023, "Extending context window of large language models via positional
interpolation"): positions are divided by the factor s = L'/L, i.e. every inverse frequency is divided by s."""

from __future__ import annotations

from torchtune_longshort.rope.base import ScaledRoPE, default_inv_freq
from torchtune_longshort.rope.checks import check_factor


class LinearRoPE(ScaledRoPE):
    """PI: ``theta_i = base^(-2i/d) / factor``. Matches transformers' ``rope_type="linear"``.

    Args:
        dim, max_seq_len, base, layout: see :class:`ScaledRoPE`.
        factor: s >= 1 (LongQLoRA uses ``ceil(L'/L)``).
    """

    method = "linear"
    has_factor = True
    scale_parameter = "factor"
    hf_rope_type = "linear"

    @classmethod
    def to_hf(cls, spec):
        return {"rope_type": "linear", "factor": float(spec["factor"])}

    @classmethod
    def from_hf(cls, entry, theta, max_position_embeddings):
        return {"method": "linear", "base": theta, "factor": float(entry["factor"]),
                "max_seq_len": max_position_embeddings}

    def __init__(self, dim, max_seq_len, base=10_000.0, *, factor: float, layout="interleaved"):
        super().__init__(dim, max_seq_len, base, layout)
        self.factor = check_factor("factor", factor)
        self.rope_init()

    def compute_inv_freq(self, device=None):
        return default_inv_freq(self.dim, self.base, device) / self.factor

    def extra_spec(self):
        return {"factor": self.factor}
