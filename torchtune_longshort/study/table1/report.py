"""The Table-1 report: ``report.md`` (the verdict first, then the numbers), ``results.csv`` (one row per cell),
``summary.json`` (every number and correlation), ``cells/<key>/result.json`` (each cell's record, the sources) and
the figure (:mod:`~torchtune_longshort.study.table1.figure`)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.plots.axes import table_number
from torchtune_longshort.output_guard import (
    atomic_open, atomic_write_json, atomic_write_text, check_output_folder, read_json, save_figure, undone_on_failure,
)
from torchtune_longshort.plural import counted
from torchtune_longshort.provenance import differs, provenance, provenance_markdown
from torchtune_longshort.study.claims_markdown import md_table
from torchtune_longshort.study.table1.analysis import PREDICTORS, TARGETS, analyze, rho_text
from torchtune_longshort.study.table1.config import Table1Config
from torchtune_longshort.study.table1.figure import FIGURE, figure

_SE = [k for k in (*PREDICTORS, *TARGETS) if k != "entropy"]  # the entropy is derived: no standard error of its own
_COLUMNS = ["variant", "method", "length", "status", *PREDICTORS, *TARGETS, *(f"{k}_se" for k in _SE), "not_scored",
            "wall_s", "error"]
_LABELS = {"sce": "SCE", "jeffreys": "Jeffreys", "entropy": "entropy", "ppl": "ppl", "passkey": "passkey acc",
           "passkey_digits": "passkey digits"}


def _f(x: Optional[float], digits: int = 4) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else table_number(x, digits)


def _cell_text(row: Dict[str, Any], key: str) -> str:
    """A value, or why there is none (:func:`~torchtune_longshort.study.table1.analysis.why_missing`: not run,
    failed, not scored and why); a value scored on part of its samples says how many were not."""
    why = row["why"].get(key)
    if row[key] is None:
        return why or "not scored"
    return _f(row[key]) + (f" ({why})" if why else "")


def _se_text(row: Dict[str, Any], key: str) -> str:
    """lm-eval's standard error of a value, or why it has none; "—" where the value itself is missing."""
    if row[key] is None:
        return "—"
    se = row["stderr"].get(key)
    return _f(se, 2) if se is not None else row["stderr_why"].get(key, "none")


def _stderr_section(entry: Dict[str, Any], command: str) -> List[str]:
    """The standard errors of every cell's values at one length, or, when no cell that ran recorded them, one line
    saying so and the command that records them."""
    ran = [r for r in entry["rows"] if r["status"] == "ok"]
    if not ran:
        return []
    if all(r["stderr_why"].get(k) == "not recorded" for r in ran for k in _SE if r[k] is not None):
        cmd = f"`{command or 'python -m torchtune_longshort.study.table1 --config <config>'} --out <a new folder> " \
              "--report-dir <this folder>`"
        return [f"Standard errors and not-scored counts at {entry['label']}: not recorded (these cells' result.json "
                "were written before the runner kept lm-eval's standard errors, the sample counts and the counts of "
                f"samples not scored). {cmd} evaluates every cell again and records them (a folder's finished cells "
                "are skipped: a new --out runs them).", ""]
    body = [[r["variant"]] + [_se_text(r, k) for k in _SE]
            + [", ".join(f"{t} {n}" for t, n in (r.get("samples") or {}).items()) or "not recorded"] for r in ran]
    return [f"Standard errors at {entry['label']} (lm-eval's, over each cell's samples; the entropy is derived from "
            "SCE and Jeffreys, whose errors are correlated, and has none):", ""] + md_table(
        ["variant", *(f"{_LABELS[k]} se" for k in _SE), "samples"], body)


def _verdict_section(cfg: Table1Config, analysis: Dict[str, Any]) -> List[str]:
    h = analysis["headline"]
    md = [f"**Verdict: the paper's claim (misalignment predicts length generalization) {h['verdict']} on this "
          f"model** — {len(cfg.variants)} training-free RoPE variants of `{cfg.checkpoint_dir}` (context L0 = "
          f"{cfg.L0}), Spearman's rho of the misalignment metric (SCE, Eq. 4) with each figure, 95% interval:", ""]
    md += [f"- {line}" for line in h["lines"]] + [""]
    return md


def _length_section(entry: Dict[str, Any], command: str = "") -> List[str]:
    lab = entry["label"]
    md = [f"## At {lab} ({entry['length']} tokens)", ""]
    body = [[c["predictor_label"], c["target_label"], str(c["n"]), rho_text(c), _f(c.get("p_permutation"), 3),
             f"{c['pearson']:+.2f}" if c.get("pearson") is not None else "—", c["verdict"]]
            for c in entry["correlations"]]
    md += md_table(["predictor", "figure", "n", "Spearman rho [95% CI]", "p (permutation)", "Pearson r",
                    "verdict (claim: ppl rho > 0, passkey rho < 0)"], body)
    rows = [[r["variant"], r["method"] or "—"] + [_cell_text(r, k) for k in (*PREDICTORS, *TARGETS)]
            + [_f(r.get("wall_s"), 3)] for r in entry["rows"]]
    md += md_table(["variant", "method", "SCE", "Jeffreys", "entropy", "ppl", "passkey acc", "passkey digits",
                    "cell s"], rows)
    why = [f"{r['variant']}: {r['error']}" for r in entry["rows"] if r["status"] == "failed"]
    if why:
        md += ["Failed cells: " + "; ".join(w[:300] for w in why), ""]
    return md + _stderr_section(entry, command)


def _measured_section(cfg: Table1Config, command: str) -> List[str]:
    ev = cfg.eval
    return ["## What was measured", "",
            f"Config `{cfg.config_path}`{' --quick' if cfg.quick else ''}"
            + (f"; command `{command}`" if command else "")
            + ". No training: each variant is the pre-trained checkpoint with its RoPE scaled at load "
            f"(`longshort` eval model, `rope=<method>`, factor = length / {cfg.L0} unless given), run at each length "
            f"of {[length_label(n) for n in cfg.lengths]} with the task pack (`longshort_ppl`, `longshort_passkey`, "
            f"`longshort_misalignment`), {ev.dtype} on {ev.device}. Per cell: "
            f"{counted(ev.ppl_num_samples, 'perplexity sequence')} of the full length from `{ev.ppl_source}`, "
            f"{counted(ev.mis_num_samples, 'misalignment sample')} (suffix lengths l1, l2 ~ U[L/2, L], seeded), "
            f"{counted(ev.passkey_num_samples, 'passkey prompt')} per depth; "
            f"task metadata {json.dumps(ev.metadata or {})}. Every variant sees the same texts, draws and prompts.",
            "", "Variants: " + "; ".join(f"`{k}` = {v.rope}" for k, v in cfg.variants.items()) + ".", "",
            "Cells read: a number (with how many of its samples could not be scored, and why, when some could "
            "not); `not scored (k of n samples): <why>`: the cell ran but that task gave no value at that length "
            "(the text could not fill the length, no data, a prompt longer than the model takes); `failed`: the "
            "cell's lm-eval run failed (its error below the table); `not run`: no result yet (run the command again: "
            "done cells are skipped). p: the permutation p-value of rho (exact over all pairings up to 9 variants). "
            "Standard errors: lm-eval's, over a cell's samples (the spread across variants is what rho reads).", ""]


def _provenance_section(prov: Dict[str, Any], recs: Dict[str, Dict[str, Any]]) -> List[str]:
    """This report's provenance, and the cells computed under another one (their result.json says which): a
    resumed run whose cells came from another commit or environment is marked, not refused (its numbers stand for
    the code that made them, and rerunning a 2-hour table for a documentation commit would waste it)."""
    md = ["## Provenance", "", "This report was built by:", "", provenance_markdown(prov), ""]
    ran = {k: r.get("provenance") for k, r in recs.items() if r.get("status") not in (None, "not run")}
    other = sorted(k for k, p in ran.items() if isinstance(p, dict) and differs(p, prov))
    if other:
        md += [f"Cells computed under another provenance (see their result.json): {', '.join(other)}.", ""]
    elif ran:
        md += ["Every cell's result.json records this provenance (device aside).", ""]
    return md


def _write_tables(rdir: Path, recs: Dict[str, Dict[str, Any]], analysis: Dict[str, Any]) -> None:
    """``cells/<key>/result.json`` of every cell that ran, and ``results.csv`` (one row per cell)."""
    for key, rec in recs.items():
        if rec.get("status") != "not run":  # its folder made by atomic_write_json, once recorded as the report's
            atomic_write_json(rdir / "cells" / key / "result.json", rec, indent=1, default=str)
    with atomic_open(rdir / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for entry in analysis["per_length"].values():
            for r in entry["rows"]:
                w.writerow({**r, "length": entry["length"], **{f"{k}_se": r["stderr"].get(k) for k in _SE},
                            "not_scored": "; ".join(f"{k}: {why}" for k, why in r["why"].items())})


def _earlier_report(rdir: Path):
    """What an earlier Table 1 report (or run) wrote in ``rdir``: all of it when its ``summary.json`` is there,
    else the ``cells/<key>/result.json`` that are cell records (this run's own ``--out`` and its ``cells/``, and
    another Table 1's ``--out``, whose records the report's copies replaced, are refused before:
    ``Table1.check_report_apart``; a report killed before its summary.json is told by its ``WRITING`` record,
    ``output_guard.undone_on_failure``)."""
    summary = read_json(rdir / "summary.json")
    if isinstance(summary, dict) and {"analysis", "cells"} <= set(summary):
        return True
    return [p.relative_to(rdir).as_posix() for p in rdir.glob("cells/*/result.json")
            if isinstance(rec := read_json(p), dict) and {"key", "status", "spec"} <= set(rec)]


# what the report writes into its folder (the cells' copies among them: never into --out's own cells/, refused before)
REPORT_WRITES = ("report.md", "summary.json", "results.csv", FIGURE, "cells")


def check_table1_report_dir(report_dir: Path) -> None:
    """A report folder holding a file of a name the report writes that no earlier Table 1 report wrote (a
    ``report.md`` of the user's) is refused before anything runs: the report wrote over it, after every cell."""
    check_output_folder(report_dir, "--report-dir", ("report.md", "summary.json", "results.csv", FIGURE,
                                                     "cells/*/result.json"), _earlier_report)


def build_table1_report(cfg: Table1Config, recs: Dict[str, Dict[str, Any]], report_dir: Path,
                        wall_s: Optional[float] = None, note: str = "", command: str = "") -> Dict[str, Any]:
    """Write the report (module doc) from the cells' records into ``report_dir``; returns summary.json's data.
    Every file is written whole or not at all, summary.json last; a call that fails (a full disk, Ctrl-C) takes
    back what it added, so that the same command runs again (``output_guard.undone_on_failure``)."""
    with undone_on_failure(report_dir, REPORT_WRITES):
        return _build(cfg, recs, Path(report_dir), wall_s, note, command)


def _build(cfg: Table1Config, recs: Dict[str, Dict[str, Any]], rdir: Path, wall_s: Optional[float], note: str,
           command: str) -> Dict[str, Any]:
    analysis = analyze(recs, list(cfg.lengths))
    _write_tables(rdir, recs, analysis)
    save_figure(figure(cfg, analysis), rdir / FIGURE, dpi=110)
    md = [f"# Table 1 on a real model: `{cfg.name}`{' (quick variant: numbers mean nothing)' if cfg.quick else ''}",
          ""]
    md += _verdict_section(cfg, analysis) + ([note, ""] if note else [])
    md += [f"![misalignment against performance]({FIGURE})", ""] + _measured_section(cfg, command)
    for entry in analysis["per_length"].values():
        md += _length_section(entry, command)
    if wall_s is not None:
        md += ["## Wall time", "", f"The last invocation: {wall_s:.0f} s ({wall_s / 60:.1f} min); cells' own clocks: "
               + ", ".join(f"{r['key']} {r.get('wall_s', 0):.0f} s" for r in recs.values() if r.get("wall_s")), ""]
    prov = provenance(device=None, stdlib=True)  # the machine that builds the report
    md += _provenance_section(prov, recs)
    atomic_write_text(rdir / "report.md", "\n".join(md))
    summary = {"name": cfg.name, "quick": cfg.quick, "config": cfg.to_dict(), "analysis": analysis,
               "cells": {k: {"status": r.get("status"), "wall_s": r.get("wall_s"), "error": r.get("error")}
                         for k, r in recs.items()},
               "figure": FIGURE, "wall_s": wall_s, "command": command, "provenance": prov}
    atomic_write_json(rdir / "summary.json", summary, indent=1, default=str)
    return summary
