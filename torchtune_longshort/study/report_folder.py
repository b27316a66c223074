"""A study report's folder: what the report writes there (:data:`REPORT_WRITES`), whether a finished report is there
(:func:`finished_report`), which of its files an earlier report wrote (:func:`earlier_files`, from its
``summary.json``) and the check that refuses a folder holding a user's file of one of those names
(:func:`check_report_dir`). The study's report and the figures-only redraw both ask this module, so neither
overwrites a file the other would refuse to."""

from __future__ import annotations

from pathlib import Path
from typing import List

from torchtune_longshort.output_guard import check_output_folder, read_json

# every plot a study report (study/figures.py, study/claim_figures.py) or its redraw draws into its folder: the
# drawing modules save under these names, so the folder check and the figures cannot disagree on one
PPL_PLOT = "ppl_vs_length.png"
MISALIGNMENT_PLOT = "misalignment_vs_length.png"
BABILONG_PLOT = "babilong_depth_length.png"
PASSKEY_PLOT = "passkey_depth_length.png"
FINETUNE_PLOT = "finetune_convergence.png"
CURVES_PLOT = "per_position_loss.png"
BASE_FAILURE_PLOT = "base_failure.png"
SCATTER_PLOT = "metric_vs_performance.png"
ALPHA_PLOT = "alpha_curves.png"
E_RANGE_PLOT = "e_range_bars.png"
DIVERGENCE_PLOT = "divergence_bars.png"
PLOTS = (PPL_PLOT, MISALIGNMENT_PLOT, BABILONG_PLOT, PASSKEY_PLOT, FINETUNE_PLOT, CURVES_PLOT, BASE_FAILURE_PLOT,
         SCATTER_PLOT, ALPHA_PLOT, E_RANGE_PLOT, DIVERGENCE_PLOT)
# what the report writes into its folder (its own: an earlier report's, or nothing of these names); another PNG
# there (a maintainer's alpha_curves_before.png beside a redrawn report) is none of the report's business
REPORT_WRITES = ("report.md", "summary.json", "runs", *PLOTS)


def finished_report(folder: Path) -> bool:
    """Whether ``folder`` holds a study report written to its end (its ``summary.json``, which is written last)."""
    summary = read_json(Path(folder) / "summary.json")
    return isinstance(summary, dict) and "tables" in summary and "claims" in summary


def check_report_dir(report_dir: Path, option: str = "--report-dir") -> None:
    """A report folder the study (or the redraw, ``option`` ``--report``) may write: none of what the report writes
    (report.md, summary.json, runs/, PNGs) is there but what an earlier study report wrote (its ``summary.json``,
    and the plots it lists). Checked before anything is written: a user's PNG named like a plot the earlier report
    did not draw (``finetune_convergence.png``) was overwritten by a rerun, or a redraw, that drew it."""
    check_output_folder(report_dir, option, REPORT_WRITES, _earlier_names)


def _earlier_names(rdir: Path) -> List[str]:
    """The names in ``rdir`` an earlier study report wrote (none where there is no finished one)."""
    return ["report.md", "summary.json", "runs"] + earlier_files(rdir) if finished_report(rdir) else []


def earlier_files(rdir: Path) -> List[str]:
    """What an earlier study report in ``rdir`` wrote, from its ``summary.json``: its plots and run records (a
    rerun removes those it does not write again: a plot or a run the config no longer has)."""
    if not finished_report(rdir):
        return []
    summary = read_json(rdir / "summary.json")
    plots = [p for p in summary.get("plots") or [] if isinstance(p, str)]
    runs = [f"runs/{k}" for k in summary.get("runs") or {} if isinstance(k, str)]
    return plots + runs + [f"{r}/{f}" for r in runs for f in ("result.json", "lm_eval_results.json")]
