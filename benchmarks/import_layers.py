"""The package's declared layering, which benchmarks/import_graph.py checks every import against: each module below
``torchtune_longshort`` sits on a floor, and no import may run from a lower floor to a higher one."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

PACKAGE = "torchtune_longshort"

# The declared layering: module name below the package -> (floor, what lives there). A key also matches its
# submodules, except the keys of EXACT (a package's own __init__): every study module is placed one by one.
FLOORS: Dict[str, Tuple[float, str]] = {
    "": (0, "ground: the package"),
    **{m: (0, "ground: stdlib / torch only") for m in (
        "windows", "lengths", "intervals", "refusals", "devices", "pack_prefix", "_quiet", "plural",
        "output_guard", "made_folders", "disk_space", "launcher", "worker_pool", "file_locks", "temporary_files",
        "started_as", "home_folder", "umask")},
    **{m: (1, "kits on the ground") for m in ("rope", "loss", "hidden_states", "configs_cli", "config", "plots")},
    **{m: (2, "models and data") for m in ("models", "data")},
    **{m: (3, "what reads models and data") for m in ("metrics", "training", "provenance")},
    **{m: (4, "features") for m in ("eval", "synthetic", "recipes")},
    # the study, one stage after another
    **{f"study.{m}": (5.0, "study: config") for m in (
        "fields", "values", "base_config", "eval_config", "grid", "plan", "schema", "config", "table1.config")},
    **{f"study.{m}": (5.1, "study: plan") for m in (
        "run_configs", "load", "preflight", "pretrain_mix", "portable")},
    **{f"study.{m}": (5.2, "study: run") for m in (
        "stop", "stages", "records", "base_failure", "run_stages", "runner", "table1.runner")},
    **{f"study.{m}": (5.3, "study: collect") for m in (
        "stats", "labels", "comparisons", "claims", "tables", "eval_used", "table1.analysis")},
    **{f"study.{m}": (5.4, "study: report and figures") for m in (
        "figures", "claim_figures", "claims_markdown", "report", "report_folder", "__main__", "table1.figure",
        "table1.report", "table1.__main__", "table1")},
    "study": (5.4, "study: report and figures"),  # the package's __init__ re-exports the whole pipeline
}
EXACT = {"", "study", "study.table1"}

def short(module: str) -> str:
    return module[len(PACKAGE) + 1:] if module.startswith(PACKAGE + ".") else "(package)"


def floor_of(module: str) -> Optional[Tuple[float, str]]:
    """``(floor, name)`` of ``module`` from :data:`FLOORS`; None when no key matches (unplaced)."""
    rest = "" if module == PACKAGE else short(module)
    keys = [k for k in FLOORS if rest == k or (k not in EXACT and rest.startswith(k + "."))]
    return FLOORS[max(keys, key=len)] if keys else None
