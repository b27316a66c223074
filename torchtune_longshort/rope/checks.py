"""The argument checks every RoPE method's constructor shares: each returns the value, or raises ``ValueError`` in
one line naming the argument, its value and what is accepted."""

from __future__ import annotations

import math
from typing import Optional


def check_head_dim(dim) -> int:
    """``dim`` must be a positive even int (RoPE rotates pairs of dimensions)."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0 or dim % 2:
        raise ValueError(f"head_dim={dim!r} is not accepted: RoPE needs a positive even integer head dimension")
    return dim


def check_positive_int(name: str, value) -> int:
    """``value`` must be an int >= 1; the error names ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is not accepted: expected an integer >= 1")
    return value


def check_factor(name: str, value) -> float:
    """A context-extension factor: a finite number >= 1 (a factor < 1 would shrink the context)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise ValueError(f"{name}={value!r} is not accepted: expected a number >= 1 (the context-extension factor)")
    return float(value)


def check_base(name: str, value) -> float:
    """A RoPE base: a finite number > 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 1:
        raise ValueError(f"{name}={value!r} is not accepted: expected a RoPE base > 1 (e.g. 10000)")
    return float(value)


def check_positive_number(name: str, value, what: str = "a positive number") -> float:
    """A finite number > 0 (not a bool, not a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r} is not accepted: expected {what}")
    return float(value)


def check_optional_positive(name: str, value) -> Optional[float]:
    """None, or a finite number > 0 (an attention factor's override)."""
    return None if value is None else check_positive_number(name, value, "a positive number or None")


def check_flag(name: str, value) -> bool:
    """``True`` or ``False`` (a string such as ``"no"`` would read as true)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not accepted: expected true or false")
    return value


def hf_extended_length(max_position_embeddings: int, original: int, factor: float) -> int:
    """The positions a transformers ``rope_scaling`` entry with an original length covers: ``original x factor``, or
    ``max_position_embeddings`` when it is longer. Hub configs write both ways: Llama-3.1 and Phi-3.5 put the
    extended length in ``max_position_embeddings``; Qwen2.5's YaRN instructions keep the pre-trained one there."""
    return max(int(max_position_embeddings), int(round(int(original) * float(factor))))
