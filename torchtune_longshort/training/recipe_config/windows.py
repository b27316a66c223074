"""The ``windows`` section: ``seq_len`` (L), ``e_range`` and ``window_bos``, top-level keys of the recipe config.

The geometry itself (the ``e_range`` grammar, its default, the even-L rule) is owned by
:mod:`torchtune_longshort.windows`; this section only declares the fields and checks them with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, Tuple

from torchtune_longshort.lengths import length_value
from torchtune_longshort.config.fields import Section, setting
from torchtune_longshort.config.values import boolean, named_once, refuse
from torchtune_longshort.windows import DEFAULT_E_RANGE, resolve_e_range, validate_window_length


def _seq_len(path: str, value: Any) -> int:
    if isinstance(value, str):  # a label: 1k = 1024
        value = length_value(path, value)
    try:
        validate_window_length(value, field=path)
    except (TypeError, ValueError) as e:
        raise ValueError(str(e)) from None
    return value


def _e_range(path: str, value: Any) -> Any:
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 2:
        raise refuse(path, value, "a pair [lo, hi] of ints or expressions in L, e.g. [1, L/2]")
    return list(value)


@dataclass(frozen=True)
class WindowsConfig(Section):
    """Dual windows: L tokens each, the second shifted by ``e ~ U[e_range]`` (paper Sec. 4)."""

    seq_len: int = setting(doc="L, the length of each window (even, >= 4)", check=_seq_len, resume="exact")
    e_range: Any = setting(list(DEFAULT_E_RANGE), doc="[lo, hi] of the shift e: ints or expressions in L",
                           check=_e_range, resume="exact")
    window_bos: bool = setting(False, doc="pre-training: BOS over the first token of each window (alpha must be 0)",
                               check=boolean, resume="exact")

    @property
    def e_bounds(self) -> Tuple[int, int]:
        """``(e_lo, e_hi)`` of ``e_range`` at ``seq_len``."""
        return resolve_e_range(self.e_range, self.seq_len)

    def check(self, where: str) -> None:
        try:
            self.e_bounds
        except (ValueError, TypeError, ZeroDivisionError) as e:
            raise ValueError(named_once("e_range", list(self.e_range), e, f" at seq_len={self.seq_len}")) from None
