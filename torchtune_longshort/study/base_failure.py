"""Does the unscaled base fail beyond its training length L0? Its ratios, and the gate the grid waits on."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, Optional

from torchtune_longshort.study.base_config import GATE_MEASURES
from torchtune_longshort.study.records import curve_mean, value

if TYPE_CHECKING:
    from torchtune_longshort.study.config import StudyConfig


def base_failure(cfg: "StudyConfig", base: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """How the unscaled base fails beyond its training length L0, from its result.json (None without ppl at L0).

    ``sequence_ratio``: ppl of ``4 L0``-token sequences over ppl of ``L0``-token sequences (the usual ppl-vs-length
    reading). ``position_ratio``: inside the same ``4 L0``-token sequences, the ppl of the tokens at positions
    ``[3 L0, 4 L0)`` over that of the tokens at ``[0, L0)`` (per-position loss; ``None`` without that curve);
    ``late_position_ratio``: the same over ``[L0 / 2, L0)``, tokens that already had half a window of context (the
    early positions' short context does not inflate the reference).
    ``rows``: per evaluated length, the ppl and its ratio to the ppl at L0; ``bins``: per-position ppl of the
    longest curve over ``[0, L0)``, ``[L0, 2 L0)``, ``[2 L0, 4 L0)``, ...
    """
    L0 = cfg.L0
    at_l0 = value(base, "ppl", L0)
    if at_l0 is None:
        return None
    rows = [{"length": n, "ppl": value(base, "ppl", n),
             "ratio": (value(base, "ppl", n) / at_l0) if value(base, "ppl", n) else None}
            for n in cfg.eval.ppl_lengths]
    at_4 = value(base, "ppl", 4 * L0)
    inside, far = curve_mean(base, 4 * L0, 0, L0), curve_mean(base, 4 * L0, 3 * L0, 4 * L0)
    late = curve_mean(base, 4 * L0, L0 // 2, L0)
    top = max(cfg.eval.ppl_lengths)
    edges = [0, L0] + [L0 * 2 ** k for k in range(1, 16) if L0 * 2 ** k <= top]
    bins = [{"lo": lo, "hi": hi, "ppl": math.exp(m) if (m := curve_mean(base, top, lo, hi)) is not None else None}
            for lo, hi in zip(edges, edges[1:])]
    return {"ppl_L0": at_l0, "ppl_4L0": at_4, "sequence_ratio": (at_4 / at_l0) if at_4 else None,
            "position_ratio": math.exp(far - inside) if (inside is not None and far is not None) else None,
            "late_position_ratio": math.exp(far - late) if (late is not None and far is not None) else None,
            "rows": rows, "bins": bins, "curve_length": top}


def base_gate_refusal(cfg: "StudyConfig", base: Dict[str, Any]) -> Optional[str]:
    """Why the fine-tunes must not start, or None: with ``base.min_ppl_ratio`` set, the unscaled base must fail
    beyond its training length as real models do (its ``base.gate_measure`` ratio of :func:`base_failure` at least
    that large), or no RoPE method has anything to fix."""
    need = cfg.base.min_ppl_ratio
    if not need or base.get("status") != "ok":
        return None
    L0, measure = cfg.L0, cfg.base.gate_measure
    b = base_failure(cfg, base)
    ratio = b and b[GATE_MEASURES[measure]]
    if ratio is None:
        return (f"base.min_ppl_ratio={need}: the base has no ppl (and per-position curve) at L0={L0} and "
                f"4 L0={4 * L0} (add both to eval.ppl_lengths)")
    if ratio < need:
        return (f"the base does not fail beyond L0: its {measure} ratio is {ratio:.3g} < base.min_ppl_ratio="
                f"{need} (pre-train longer, or with more layers / a larger head dimension)")
    return None
