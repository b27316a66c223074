"""The study's report: paper-layout Markdown tables (mean ± sd over seeds), plots, raw JSON of every run.

Layout of ``report_dir``::

    report.md                  tables: rows = loss (CE baseline first, then + alpha x misalignment), columns = lengths
    summary.json               every number in the tables, with the per-seed values and the run keys behind it
    runs/<key>/result.json     the run's record (status, error, train summary, lm-eval metrics) — the cell sources
    runs/<key>/lm_eval_results.json   lm-eval's own results file for that run
    ppl_vs_length.png, misalignment_vs_length.png, babilong_depth_length.png, per_position_loss.png

Each table row ends with the links to the ``result.json`` files its cells were computed from; ``summary.json``
names the JSON key of every cell (``results.<task>.<metric>``).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.output_guard import (
    atomic_copy, atomic_write_json, atomic_write_text, read_json, undone_on_failure,
)
from torchtune_longshort.plots.available import matplotlib_problem
from torchtune_longshort.plural import counted
from torchtune_longshort.provenance import provenance, provenance_markdown
from torchtune_longshort.study.base_failure import base_gate_refusal
from torchtune_longshort.study.claim_figures import claim_plots
from torchtune_longshort.study.claims import analyze
from torchtune_longshort.study.claims_markdown import claims_markdown, md_table, verdicts_markdown
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.eval_used import eval_used
from torchtune_longshort.study.figures import write_plots
from torchtune_longshort.study.records import curve_mean, value
from torchtune_longshort.study.report_folder import REPORT_WRITES, earlier_files
from torchtune_longshort.study.run_configs import STUDY_JSON, check_same_variant
from torchtune_longshort.study.tables import build_tables, cell_text, fmt, load_records, mean_sd


def _outcome(cfg: StudyConfig, tables: Dict[str, Any]) -> Dict[str, Any]:
    """Paired by seed: value(alpha, seed) - value(0, seed), per method / table / column; mean, sd, how many lower."""
    res: Dict[str, Any] = {}
    for tid in ("misalignment", "jeffreys", "ppl"):
        if tid not in tables:
            continue
        for mname, rows in tables[tid]["methods"].items():
            seed_of = {r.key: r.seed for r in cfg.grid}
            base = next(r for r in rows if r["alpha"] == 0)
            for row in rows:
                if not row["alpha"]:
                    continue
                for col, cell in row["cells"].items():
                    diffs = []
                    for k, v in cell["values"].items():
                        bk = next((b for b in base["cells"][col]["values"] if seed_of[b] == seed_of[k]), None)
                        if bk is not None:
                            diffs.append(v - base["cells"][col]["values"][bk])
                    m, s = mean_sd(diffs)
                    res.setdefault(tid, {}).setdefault(mname, {}).setdefault(f"{row['alpha']:g}", {})[col] = {
                        "mean_diff": m, "sd_diff": s, "n_pairs": len(diffs), "n_lower": sum(d < 0 for d in diffs)}
    return res


def _provenance(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]) -> Tuple[Dict[str, Any], List[str]]:
    """The report's own provenance block, and a Markdown section that also names the runs whose provenance
    (recorded in their result.json when they ran) differs from it in anything but the device."""
    runs = {k: r["provenance"] for k, r in recs.items() if isinstance(r.get("provenance"), dict)}
    # the machine that builds the report (it computes nothing on the runs' device; each run records its own)
    prov = provenance(device=None, stdlib=any("stdlib_corpus" in p for p in runs.values()))

    def same(p: Dict[str, Any]) -> bool:
        return {k: v for k, v in p.items() if k != "device"} == {k: v for k, v in prov.items() if k != "device"}

    md = ["## Provenance", "", "This report was built by:", "", provenance_markdown(prov), ""]
    differ = sorted(k for k, p in runs.items() if not same(p))
    unknown = sorted(k for k, r in recs.items() if r.get("status") not in (None, "not run") and k not in runs)
    if differ:
        md += [f"Runs computed under another provenance (see their result.json): {', '.join(differ)}.", ""]
    if unknown:
        md += [f"Runs with no provenance recorded (written by an older version): {', '.join(unknown)}.", ""]
    if not differ and not unknown and runs:
        md += ["Every run's result.json records the same provenance (device aside).", ""]
    return prov, md


def _outcome_markdown(outcome: Dict[str, Any], tables: Dict[str, Any]) -> List[str]:
    md: List[str] = []
    md += ["## alpha > 0 against alpha = 0, paired by seed", "",
           "Difference value(alpha) − value(0) for the same method and seed (negative = lower with the "
           "misalignment term); mean ± sd over seeds, and in how many seeds it was lower.", ""]
    for tid, per in outcome.items():
        cols = tables[tid]["columns"]
        body = []
        for mname, per_a in per.items():
            for a, per_c in per_a.items():
                body.append([f"{tid}", mname, a] + [
                    (f"{cell_text(per_c[c]['mean_diff'], per_c[c]['sd_diff'])} "
                     f"({per_c[c]['n_lower']}/{per_c[c]['n_pairs']} lower)"
                     if per_c[c]["n_pairs"] else "—") for c in cols])
        md += md_table(["metric", "method", "alpha"] + cols, body)

    return md


def _runs_markdown(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]) -> List[str]:
    """Every checkpoint: training's last steps, its entropy and where its loss falls, wall times, its error."""
    L, top = cfg.L, max(cfg.eval.ppl_lengths)
    md: List[str] = []
    md += ["## Runs", ""]
    body = []
    for key, rec in recs.items():
        tr = (rec.get("train") or {})
        last = next((v for k, v in tr.items() if k.startswith("mean_last_")), {})
        body.append([key, rec.get("status"), fmt(last.get("ce")), fmt(last.get("misalignment")),
                     fmt(value(rec, "entropy", L)), fmt(curve_mean(rec, top, 0, L)), fmt(curve_mean(rec, top, L, top)),
                     fmt(rec.get("wall_s_train")), fmt(rec.get("wall_s_eval")),
                     (_failure(rec) if rec.get("status") == "failed" else "")[:300]])
    md += ["Training columns: mean of the last 10 logged steps of the recipe's metrics.jsonl. Entropy: mean "
           f"next-token entropy (nats) at the misalignment task's {L}-token windows; loss columns: mean NLL of the "
           f"{length_label(top)}-token perplexity curve below and from L = {L}. Wall times in seconds.", ""]
    md += md_table(["run", "status", "train CE", "train misalignment", "entropy", "loss, pos < L", "loss, pos >= L",
                    "train s", "eval s", "error"], body)
    return md


def _failure(rec: Dict[str, Any]) -> str:
    """``<stage>: <error>`` of a failed run, its stage said once (a record written before the error left its stage
    out holds 'train: recipe exited ...')."""
    stage, error = rec.get("stage"), str(rec.get("error"))
    return error if error.startswith(f"{stage}: ") else f"{stage}: {error}"


def _wall_markdown(recs: Dict[str, Dict[str, Any]], wall: Optional[float], jobs: Any) -> List[str]:
    """Where the time went: the last invocation (``jobs``: its fine-tunes at once, from its study.json; None: not
    recorded), the base's stages, the fine-tunes' mean stages."""
    md = ["## Wall time", ""]
    if wall is not None:
        done = all(r.get("status") != "not run" for r in recs.values())
        md += [f"- the last invocation of the study command: {wall:.0f} s ({wall / 60:.1f} min)"
               + (f", {counted(jobs, 'fine-tune')} at once" if isinstance(jobs, int) else "")
               + ("" if done else "; it did not finish the grid: runs above are marked not run")]
    base = recs.get("base") or {}
    if base.get("status") == "ok":  # a stage with no clock (a base not evaluated: eval.eval_base false) says so
        stages = [f"{name} {fmt(base[f])} s" if base.get(f) is not None else f"no {name} recorded"
                  for name, f in (("training", "wall_s_train"), ("evaluation", "wall_s_eval"))]
        md += [f"- base: {', '.join(stages)} "
               "(as recorded by the invocation that wrote its result.json; a stage done by an earlier invocation "
               "is skipped and records about 0 s)"]
    ft = [r for k, r in recs.items() if k != "base" and r.get("status") == "ok"]
    if ft:
        tr, ev = (statistics.mean(float(r.get(f) or 0.0) for r in ft) for f in ("wall_s_train", "wall_s_eval"))
        total = sum(float(r.get("wall_s") or 0.0) for r in ft)
        md += [f"- fine-tunes: {len(ft)} ok, {tr:.0f} s training and {ev:.0f} s evaluation each on average; "
               f"their own clocks sum to {total / 60:.1f} min" + ("" if jobs == 1 else " (runs in parallel overlap)")]
    return md + [""]


def build_report(out: Path, report_dir: Path, cfg: StudyConfig, wall_s: Optional[float] = None,
                 note: str = "") -> Dict[str, Any]:
    """Write ``report_dir`` (see module docstring) from the run folders under ``out``; returns summary.json's data.
    Every file is written whole or not at all, ``summary.json`` last; a call that fails removes what it made."""
    rdir = Path(report_dir)
    check_same_variant(Path(out), cfg)
    with undone_on_failure(rdir, REPORT_WRITES, replaces=earlier_files(rdir)):
        return _build_report(Path(out), rdir, cfg, wall_s, note)


def _copy_records(out: Path, rdir: Path, recs: Dict[str, Dict[str, Any]]) -> None:
    """Raw JSON of every run, next to the report, so that its links stay valid when the report is moved."""
    for key, rec in recs.items():
        if rec.get("status") == "not run":
            continue
        d = rdir / "runs" / key  # made by atomic_open, once undone_on_failure has recorded it
        atomic_write_json(d / "result.json", rec, indent=1, default=str)
        src = out / rec.get("run_dir", "") / "eval"
        files = sorted(src.rglob("results_*.json"), key=lambda p: p.name) if src.is_dir() else []
        if files:
            atomic_copy(files[-1], d / "lm_eval_results.json")


def _build_report(out: Path, rdir: Path, cfg: StudyConfig, wall_s: Optional[float], note: str) -> Dict[str, Any]:
    rdir.mkdir(parents=True, exist_ok=True)
    recs = load_records(out, cfg)
    _copy_records(out, rdir, recs)
    cfg, settings = eval_used(cfg, recs)  # labelled by what the runs used, not by a config edited since
    tables = build_tables(cfg, recs)
    outcome = _outcome(cfg, tables)
    analysis = analyze(cfg, recs)
    no_plots = matplotlib_problem()  # a declared dependency: a broken environment still gets its tables and JSON
    if no_plots is not None:
        no_plots = f"No plots: {no_plots} and rerun the same command with --report-only to draw them."
        print(f"[study] {no_plots}", file=sys.stderr)
        plots: List[str] = []
    elif any(r.get("status") == "ok" for k, r in recs.items() if k != "base"):
        plots = write_plots(cfg, tables, recs, rdir) + claim_plots(cfg, analysis, recs, rdir)
    else:  # no fine-tune to draw (e.g. the base gate refused the grid): only the base's own figure
        plots = claim_plots(cfg, analysis, recs, rdir, base_only=True)
    study_json, wall = out / STUDY_JSON, wall_s
    study = read_json(study_json) if wall is None else None  # a study.json cut off: no wall time to tell
    jobs = cfg.jobs if wall is not None else None
    if isinstance(study, dict):  # the invocation's own jobs, not the config's now (a rebuild, --jobs)
        wall, jobs = study.get("wall_s_this_invocation"), (study.get("config") or {}).get("jobs")

    md: List[str] = [f"# Study `{cfg.name}`{' (quick variant: numbers mean nothing)' if cfg.quick else ''}", ""]
    md += [f"Config: `{cfg.config_path}`{' --quick' if cfg.quick else ''}. Base: "
           + (f"`{cfg.base.checkpoint_dir}`" if cfg.base.given else
              f"pre-trained here at L0 = {cfg.L0} for {cfg.base.pretrain.max_steps} steps (alpha = 0)")
           + f"; fine-tuned at L = {cfg.L} for {cfg.finetune.max_steps} steps per run; "
           f"methods {list(cfg.methods)}, alphas {cfg.alphas}, seeds {cfg.seeds}.", ""]
    if note:
        md += [note, ""]
    for line in settings:
        md += [line, ""]
    refusal = base_gate_refusal(cfg, recs.get("base", {}))
    if refusal:
        md += [f"**The fine-tuning grid did not run: {refusal}.** The base's failure beyond L0 is under "
               "\"The base model: how it fails beyond L0\" below; every fine-tune row is empty.", ""]
    md += verdicts_markdown(analysis, quick=cfg.quick)
    spread = ("the value of the one seed" if len(cfg.seeds) == 1
              else "mean ± sample sd over seeds (one value: no ±)")
    md += [f"Cells: {spread}; — : no successful run; n/a (note k): the runs succeeded but the task could not run at "
           "that length or had no data, the reason in note k under the table's title; (se x): lm-eval's standard "
           "error of a one-run cell over its samples (a BABILong subset's combined from its tasks' as lm-eval "
           "combines a group's). The `runs` column links the "
           "result.json files each cell of the row was computed from (key named in summary.json).", ""]
    for tid, t in tables.items():
        arrow = "lower is better" if t["lower_is_better"] else "higher is better"
        md += [f"## {t['title']} — {arrow}", ""] + ([t["note"], ""] if t.get("note") else [])
        for mname, rows in t["methods"].items():
            md += [f"### {mname} (`{cfg.methods[mname].method}`)", ""]
            body = []
            for row in rows:
                links = ", ".join(f"[{k}](runs/{k}/result.json)" if recs.get(k, {}).get("status") != "not run" else k
                                  for k in row["runs"])  # a run that never ran has no file to link
                body.append([row["label"]] + [row["cells"][c]["text"] for c in t["columns"]] + [links])
            md += md_table(["loss"] + [f"{c}" for c in t["columns"]] + ["runs"], body)

    md += claims_markdown(analysis, cfg)
    md += _outcome_markdown(outcome, tables) + _runs_markdown(cfg, recs)
    md += _wall_markdown(recs, wall, jobs)
    if plots:
        md += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    elif no_plots is not None:
        md += ["## Plots", "", no_plots, ""]
    prov, prov_md = _provenance(cfg, recs)
    md += prov_md
    atomic_write_text(rdir / "report.md", "\n".join(md))
    summary = {"name": cfg.name, "quick": cfg.quick, "tables": tables, "outcome": outcome,
               "claims": analysis,
               "runs": {k: {"status": r.get("status"), "stage": r.get("stage"), "error": r.get("error"),
                            "wall_s": r.get("wall_s")} for k, r in recs.items()},
               "plots": plots, "wall_s": wall, "eval_used": {"settings": cfg.eval.as_dict(), "notes": settings},
               "provenance": prov}
    atomic_write_json(rdir / "summary.json", summary, indent=1, default=str)  # last: the report is whole
    return summary
