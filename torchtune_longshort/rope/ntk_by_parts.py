"""NTK-by-parts (bloc97 2023; YaRN paper Sec. 3.2, Eq. 18-20): per-dimension interpolation without a temperature.

Dimension pairs that rotate many times within the original context L (high frequency) are kept, those that rotate
less than once are interpolated by s, and a linear ramp mixes the two in between: YaRN's frequency rule, without
YaRN's attention temperature (its cos/sin multiplier is 1). transformers runs it as ``rope_type: "yarn"`` with
``attention_factor: 1.0``.
"""

from __future__ import annotations

from torchtune_longshort.rope.yarn import YaRNRoPE


class NTKByPartsRoPE(YaRNRoPE):
    """NTK-by-parts RoPE.

    Args:
        dim, max_seq_len, base, layout: see :class:`~torchtune_longshort.rope.base.ScaledRoPE`.
        factor: s >= 1.
        original_max_seq_len: L, the pre-trained context length.
        alpha, beta: the ramp's ends in rotations within L (paper: 1 and 32).
        truncate: round the ramp's ends outwards to whole dimensions (transformers' default, True).
    """

    method = "ntk_by_parts"
    hf_rope_type = None  # written as a yarn entry; a yarn entry read back is YaRN with attention_factor 1 (same math)

    def __init__(self, dim, max_seq_len, base=10_000.0, *, factor: float, original_max_seq_len: int,
                 alpha: float = 1.0, beta: float = 32.0, truncate: bool = True, layout="interleaved"):
        super().__init__(dim, max_seq_len, base, factor=factor, original_max_seq_len=original_max_seq_len,
                         alpha=alpha, beta=beta, attention_factor=1.0, truncate=truncate, layout=layout)

    @classmethod
    def to_hf(cls, spec):
        return {**YaRNRoPE.to_hf(spec), "attention_factor": 1.0}

    def extra_spec(self):
        spec = super().extra_spec()
        spec.pop("attention_factor")  # fixed at 1: not a parameter of this method
        return spec
