"""The learning-rate search of the paper figures (``--lrs``): which trained run each curve and seed keeps, and what a
diverged run leaves. A rate whose run diverges (``train.Diverged``) is recorded as diverged (``runs.json``,
``summary.json``'s ``meta.lr_choice`` and ``meta.runs``, the printed table) and the search goes on with the other
rates; the command fails, in one line naming the rates, only when every rate of a curve and seed diverged (before,
the first diverging rate ended the whole search)."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .run_cache import key
from .train import PAPER_LRS, Diverged, RunConfig


def diverged_record(cfg: RunConfig, e: Diverged, seconds: float) -> Dict:
    """The result of a run that diverged: its config, where it diverged (``diverged``: step, what left the finite
    numbers, the message) and ``best_val_mse`` None; it has no test MSE, misalignment or model."""
    return {"config": asdict(cfg), "diverged": {"step": e.step, "what": e.what, "message": str(e)},
            "steps": e.step, "seconds": seconds, "best_val_mse": None}


def _where(r: Dict) -> str:
    return f"lr={r['config']['lr']:g} at step {r['diverged']['step']}"


def choose_runs(curves: Dict[str, List[Tuple[str, RunConfig]]], seeds: Sequence[int],
                grid: Callable[[RunConfig], Optional[List[float]]],
                trained: Dict[str, Dict]) -> Tuple[Dict[str, Dict], Dict[str, Dict]]:
    """(results: ``trained`` plus, under each searched curve's config without the search (its base lr), the run it
    keeps; lr_choice: {"<figure>: <curve>: seed <s>": {"chosen", "val_mse" (None where diverged), "diverged"
    (lr: step)}} for each curve searched). ``grid(c)``: the rates searched for curve ``c``, or None where it keeps
    its own lr. The run kept is the one with the lowest validation MSE among the rates that did not diverge; where
    none is left (every rate diverged, or a curve's own lr did), raises ``Diverged`` naming the rates and the fix."""
    results, lr_choice = dict(trained), {}
    for n, cs in curves.items():
        for label, c in cs:
            lrs = grid(c)
            for s in seeds:
                cands = {lr: trained[key(replace(c, seed=s, lr=lr))] for lr in (lrs or [c.lr])}
                ok = {lr: r for lr, r in cands.items() if "diverged" not in r}
                if not ok:
                    raise _all_diverged(n, label, s, list(cands.values()))
                if lrs is None:
                    continue
                best_lr = min(ok, key=lambda lr: ok[lr]["best_val_mse"])
                results[key(replace(c, seed=s))] = ok[best_lr]
                lr_choice[f"{n}: {label}: seed {s}"] = {
                    "chosen": best_lr, "val_mse": {str(lr): r["best_val_mse"] for lr, r in cands.items()},
                    "diverged": {str(lr): r["diverged"]["step"] for lr, r in cands.items() if "diverged" in r}}
    return results, lr_choice


def _all_diverged(n: str, label: str, seed: int, runs: List[Dict]) -> Diverged:
    if len(runs) == 1:  # no search: the run's own line (the lr, the step, the fix)
        return Diverged(runs[0]["diverged"]["message"])
    return Diverged(f"training diverged at every learning rate of --lrs for figure {n} ({label}), seed {seed}: "
                    f"{', '.join(_where(r) for r in runs)}; use smaller --lrs values, e.g. the paper's "
                    f"{','.join(f'{lr:g}' for lr in PAPER_LRS)}")


def lr_table(lr_choice: Dict[str, Dict]) -> List[str]:
    """The lr search as printed lines: per curve and seed, each rate's validation MSE (or ``diverged at step k``),
    the chosen one marked ``*``."""
    if not lr_choice:
        return []
    lines = ["lr search (validation MSE on training lengths; * = kept):"]
    for where, ch in lr_choice.items():
        cells = []
        for lr, v in ch["val_mse"].items():
            mark = "*" if float(lr) == ch["chosen"] else ""
            shown = f"diverged at step {ch['diverged'][lr]}" if lr in ch.get("diverged", {}) else f"{v:.4g}"
            cells.append(f"lr {float(lr):g}: {shown}{mark}")
        lines.append(f"  {where}: " + " | ".join(cells))
    return lines
