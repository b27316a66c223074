"""Paired comparisons of a study's runs, the measure every claim (:mod:`~torchtune_longshort.study.claims`) is
judged by: a configuration's values by seed, the paired difference ``treated - control`` with its 95% interval and
direction (:mod:`~torchtune_longshort.study.stats`), the verdict over several such directions, and the two
comparisons the report shows beside the claims: the CE-only fine-tunes against the base, and the RoPE methods
against each other.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.study.grid import config_key
from torchtune_longshort.study.records import value
from torchtune_longshort.study.stats import direction, paired_difference

if TYPE_CHECKING:
    from torchtune_longshort.study.config import StudyConfig

Records = Dict[str, Dict[str, Any]]


# ---------------------------------------------------------------------------------------------- reading records
def by_seed(cfg: "StudyConfig", recs: Records, cid: str, family: str, n: Any) -> Dict[int, float]:
    """``{seed: value}`` of configuration ``cid`` over its successful runs."""
    out = {}
    for r in cfg.grid:
        if r.config == cid and recs.get(r.key, {}).get("status") == "ok":
            v = value(recs[r.key], family, n)
            if v is not None:
                out[r.seed] = v
    return out


def ce_id(cfg: "StudyConfig", method: str) -> str:
    return config_key(method, 0)


def train_ce(rec: Dict[str, Any]) -> Optional[float]:
    """Mean training CE of the last logged steps (the recipe's metrics.jsonl, via the run's train summary)."""
    tr = rec.get("train") or {}
    last = next((v for k, v in tr.items() if k.startswith("mean_last_")), {})
    v = last.get("ce")
    return float(v) if isinstance(v, (int, float)) else None


# ---------------------------------------------------------------------------------------------- comparisons
def compare(cfg: "StudyConfig", recs: Records, treated: str, control: str, family: str, n: Any,
            lower_is_better: Optional[bool]) -> Dict[str, Any]:
    """Paired difference ``treated - control`` of ``family`` at ``n`` over seeds, with its direction."""
    d = paired_difference(by_seed(cfg, recs, treated, family, n), by_seed(cfg, recs, control, family, n))
    d.update({"treated": treated, "control": control, "family": family, "length": n,
              "direction": direction(d, lower_is_better)})
    return d


def long_lengths(cfg: "StudyConfig") -> List[int]:
    """The perplexity lengths at and beyond the fine-tuning length L (the paper's long-context range)."""
    return [n for n in cfg.eval.ppl_lengths if n >= cfg.L]


def has_signal(cfg: "StudyConfig", recs: Records, family: str, n: Any) -> bool:
    """Whether a score varies at all across the study's runs (a task at 0 everywhere measures nothing)."""
    vals = {value(r, family, n) for r in recs.values() if r.get("status") == "ok"} - {None}
    return len(vals) > 1


def verdict_from(directions: Sequence[str], want: str) -> Tuple[str, str]:
    if not directions or all(d == "unknown" for d in directions):
        return "not measurable here", "fewer than 2 seeds with values: no interval"
    if want in directions and not any(d == opposite(want) for d in directions):
        return "held", f"the 95% interval is {want} than CE at {directions.count(want)} of {len(directions)} points"
    if opposite(want) in directions:
        return "not held", (f"the 95% interval is {opposite(want)} than CE at "
                            f"{directions.count(opposite(want))} of {len(directions)} points")
    return "not held", "every 95% interval holds 0: no difference from CE detectable with these seeds"


def opposite(d: str) -> str:
    return {"better": "worse", "worse": "better"}.get(d, d)


# A CE-only control "recovers" the base at a length within its pre-trained window when its mean ppl is at most this
# many times the base's (2%: about the spread of one seed's ppl over held-out sequences); beyond the window it must
# beat the base. benchmarks/ce_controls_cpu.py (the CPU proxy that chose the GPU study's rate) judges by it too.
RECOVERY = 1.02


def beats_base(ratio: float) -> bool:
    """Whether the CE-only fine-tunes beat the base beyond L0: their mean ppl over the base's is below 1."""
    return ratio < 1.0


def control_learned(ratio: Optional[float], length: int, L0: int) -> str:
    """The control's rule at one length, in words: within L0 it recovers the base (``ratio <= RECOVERY``), beyond
    L0 it beats it (``ratio < 1``); ``ratio`` is the CE-only fine-tunes' mean ppl over the base's."""
    if ratio is None:
        return "—"
    if length <= L0:
        return "recovers the base" if ratio <= RECOVERY else f"does NOT recover the base (> {RECOVERY}x)"
    return "beats the base" if beats_base(ratio) else "does NOT beat the base"


def ce_improvement(cfg: "StudyConfig", recs: Records) -> List[Dict[str, Any]]:
    """Per method and ppl length: the base model, CE-only fine-tunes (mean over seeds), their ratio and whether the
    control learned there (:func:`control_learned`)."""
    rows = []
    base = recs.get("base", {})
    for m in cfg.methods:
        for n in cfg.eval.ppl_lengths:
            ce = list(by_seed(cfg, recs, ce_id(cfg, m), "ppl", n).values())
            b = value(base, "ppl", n) if base.get("status") == "ok" else None
            mean = statistics.fmean(ce) if ce else None
            ratio = (mean / b) if (mean is not None and b) else None
            rows.append({"method": m, "length": n, "base": b, "ce_mean": mean, "n": len(ce), "ratio": ratio,
                         "control": control_learned(ratio, n, cfg.L0)})
    return rows


def methods_compared(cfg: "StudyConfig", recs: Records) -> Dict[str, Any]:
    """Do the RoPE methods differ? Paired by seed, each pair of methods' CE-only fine-tunes at every ppl length."""
    methods, comps = list(cfg.methods), []
    for i, m1 in enumerate(methods):
        for m2 in methods[i + 1:]:
            for n in cfg.eval.ppl_lengths:
                c = compare(cfg, recs, ce_id(cfg, m2), ce_id(cfg, m1), "ppl", n, lower_is_better=True)
                comps.append(c)
    known = [c for c in comps if c["direction"] != "unknown"]
    differ = [c for c in known if c["direction"] in ("better", "worse")]
    if not known:
        verdict, reason = "not measurable here", "fewer than 2 seeds per method"
    elif differ:
        verdict = "differ measurably"
        reason = (f"{len(differ)} of {len(known)} (pair, length) intervals exclude 0: "
                  + ", ".join(f"{c['treated']} vs {c['control']} at {length_label(c['length'])}" for c in differ[:6]))
    else:
        verdict, reason = "no measurable difference", f"all {len(known)} intervals hold 0"
    return {"verdict": verdict, "reason": reason, "comparisons": comps}
