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

import json
import math
import shutil
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from torchtune_longshort.eval.tasks import TASK_FAMILIES, task_results
from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.study.base_failure import base_gate_refusal
from torchtune_longshort.study.claims import analyze
from torchtune_longshort.study.claims_markdown import claims_markdown
from torchtune_longshort.study.eval_config import metric_of
from torchtune_longshort.study.claim_figures import claim_plots
from torchtune_longshort.study.figures import write_plots
from torchtune_longshort.study.labels import loss_label
from torchtune_longshort.study.records import (curve_mean, metric_value, not_scored_reasons, upgraded, value,
                                               why_empty)
from torchtune_longshort.study.runner import RESULT

if TYPE_CHECKING:
    from torchtune_longshort.study.config import StudyConfig
    from torchtune_longshort.study.eval_config import BabilongConfig

# table id (a study family: config.metric_of names its task and per-length metric) -> (title, lengths field,
# lower is better)
_PPL, _MIS, _PASSKEY = (TASK_FAMILIES[f].task for f in ("ppl", "misalignment", "passkey"))
TABLES = {
    "ppl": (f"Perplexity ({_PPL}, {{src}} text)", "ppl_lengths", True),
    "misalignment": (f"Misalignment metric, Eq. 4 (SCE; {_MIS} task)", "misalignment_lengths", True),
    "jeffreys": (f"Misalignment metric, Eq. 4, Jeffreys divergence (SCE minus the entropies; {_MIS} task)",
                 "misalignment_lengths", True),
    "passkey": (f"Passkey retrieval accuracy (mean over depths; {_PASSKEY} task)", "passkey_lengths", False),
    "passkey_digits": ("Passkey digits in place (graded retrieval, mean over depths; random digits score 0.1; "
                       f"{_PASSKEY} task)", "passkey_lengths", False),
}


def fmt(x: Optional[float]) -> str:
    """How a number is printed in the tables (4 significant digits); ``None`` -> an em dash."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.4g}"


def mean_sd(values: List[float]) -> Tuple[Optional[float], Optional[float]]:
    """Mean and sample standard deviation (n - 1); sd is None for a single value."""
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def cell_text(mean: Optional[float], sd: Optional[float]) -> str:
    return fmt(mean) if sd is None else f"{fmt(mean)} ± {fmt(sd)}"


def _md_table(header: List[str], rows: List[List[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return "\n".join(lines)


def load_records(out: Path, cfg: "StudyConfig") -> Dict[str, Dict[str, Any]]:
    """``{key: result.json}`` for the base and every grid run; a run with no result.json is ``not run``."""
    recs: Dict[str, Dict[str, Any]] = {}
    keys = [("base", out / "base")] + [(r.key, out / "runs" / r.key) for r in cfg.grid]
    for key, d in keys:
        p = d / RESULT
        recs[key] = upgraded(json.loads(p.read_text())) if p.is_file() else {"key": key, "status": "not run"}
    return recs


def qa_label(qa: str) -> str:
    """``"qa1,qa2,qa3,qa4,qa5"`` -> ``"QA1-QA5"``; ``"qa1"`` -> ``"QA1"``; ``"qa1,qa3"`` -> ``"QA1, QA3"``."""
    nums = [int(q.strip()[2:]) for q in qa.split(",") if q.strip()]
    if len(nums) > 2 and nums == list(range(nums[0], nums[-1] + 1)):
        return f"QA{nums[0]}-QA{nums[-1]}"
    return ", ".join(f"QA{n}" for n in nums)


def _babilong_note(bab: "BabilongConfig") -> str:
    depths = f", fact depths {bab.depths} %" if bab.depths else ""
    return (f"Data: BABILong-style samples generated here by `torchtune_longshort.eval.tasks.babilong.generator` (tasks "
            f"{qa_label(bab.qa)}, lengths {', '.join(bab.lengths)}, {bab.n} per task and length{depths}, "
            f"haystack {bab.haystack_name}), not the official BABILong data: these numbers are not "
            f"comparable with published BABILong results. The group `{TASK_FAMILIES['babilong'].task}` holds QA1-QA5; a "
            "cell marked (k/5 tasks) averages the k QA tasks that had data.")


def _coverage_text(recs: Dict[str, Dict[str, Any]], runs: List[str], task: str,
                   metric: str) -> Tuple[str, Optional[Dict]]:
    """`` (k/n tasks)`` when the cell's runs scored a group over fewer tasks than it has, and what was missing."""
    covs = [task_results(recs[k].get("coverage") or {}, task).get(metric) for k in runs]
    covs = [c for c in covs if c]
    partial = [c for c in covs if c["missing"]]
    if not partial:
        return "", None
    ks = sorted({len(c["present"]) for c in covs})
    k = str(ks[0]) if len(ks) == 1 else f"{ks[0]}-{ks[-1]}"
    info = {"present": sorted({t for c in covs for t in c["present"]}),
            "missing": sorted({t for c in partial for t in c["missing"]}), "total": partial[0]["total"]}
    return f" ({k}/{info['total']} tasks)", info


def _cell(recs: Dict[str, Dict[str, Any]], members: List[str], task: str, metric: str, reasons: List[str],
          label: str) -> Dict[str, Any]:
    """One cell over the runs ``members``: mean ± sd of the successful runs' values; "—" when no run succeeded;
    "n/a (note k)" when runs succeeded but the task could not run there (a length the model does not cover, data
    not generated), its reasons appended to the table's ``reasons`` and cited by number. A cell without a value
    says why in ``why_empty`` (:func:`~torchtune_longshort.study.records.why_empty`: not run, failed, or the
    reason for its length), which the figures write on their empty panels."""
    ok = [k for k in members if recs.get(k, {}).get("status") == "ok"]
    vals = {k: metric_value(recs[k], task, metric) for k in ok}
    vals = {k: v for k, v in vals.items() if v is not None and math.isfinite(v)}
    m, s = mean_sd(list(vals.values()))
    mark, cov = _coverage_text(recs, list(vals), task, metric)
    cell = {"mean": m, "sd": s, "n": len(vals), "values": vals, "json_key": f"results.{task}.{metric}",
            "text": cell_text(m, s) + mark}
    if cov:
        cell["partial_group"] = cov
    if not vals:
        cell["why_empty"] = why_empty(recs, members, task, label)
    blank = [k for k in ok if k not in vals]
    if blank:
        why = list(dict.fromkeys(r for k in blank for r in not_scored_reasons(recs[k], task))) or ["no value reported"]
        for r in why:
            if r not in reasons:
                reasons.append(r)
        cite = "note " + ", ".join(str(reasons.index(r) + 1) for r in why)
        cell["not_scored"] = {"runs": blank, "reasons": why}
        cell["text"] = f"n/a ({cite})" if not vals else f"{cell['text']} ({len(vals)}/{len(ok)} runs; {cite})"
    return cell


def _tables(cfg: "StudyConfig", recs: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Every table as data: per (table, method) rows of cells with mean, sd, per-run values and sources."""
    out: Dict[str, Any] = {}
    ev = cfg.eval
    specs: Dict[str, Tuple[str, str, List[Tuple[str, str, str]], bool]] = {}
    notes: Dict[str, str] = {}
    for tid, (title, field, lower) in TABLES.items():
        cols = [(length_label(n), *metric_of(tid, n)) for n in getattr(ev, field)]
        specs[tid] = (title.format(src=ev.ppl_source), tid, cols, lower)
    bab = ev.babilong
    if ev.babilong_lengths:
        cols = [(lab, *metric_of("babilong", lab)) for lab in bab.lengths] + [("all", TASK_FAMILIES["babilong"].task,
                                                                                 "acc")]
        specs["babilong"] = (f"BABILong {qa_label(bab.qa)} accuracy (official scoring, generated data)", "babilong",
                             cols, False)
        notes["babilong"] = _babilong_note(bab)
    lb, lbe = ev.longbench_e_data_dir, TASK_FAMILIES["longbench_e"].task
    if lb and any(task_results(r.get("results") or {}, lbe) for r in recs.values()):
        keys = sorted({m for r in recs.values() for m in task_results(r.get("results") or {}, lbe)
                       if m.startswith("score")})
        specs["longbench_e"] = (f"LongBench-E ({lbe})", "longbench_e", [(k, lbe, k) for k in keys], False)
        notes["longbench_e"] = ("The group holds 13 datasets; a cell marked (k/13 tasks) averages the k datasets "
                                "whose data files were present.")
    for tid, (title, _prefix, cols, lower) in specs.items():
        per_method, reasons = {}, []  # reasons: the table's notes, numbered from 1 in the cells that cite them
        for mname in cfg.methods:
            rows = []
            for a in cfg.alphas:
                members = [r.key for r in cfg.runs_of(mname, a)]
                ok = [k for k in members if recs[k].get("status") == "ok"]
                cells = {col: _cell(recs, members, task, metric, reasons, col) for col, task, metric in cols}
                rows.append({"label": loss_label(a), "alpha": a, "runs": members, "ok_runs": ok, "cells": cells})
            if ev.eval_base:
                ok = ["base"] if recs.get("base", {}).get("status") == "ok" else []
                cells = {col: _cell(recs, ["base"], task, metric, reasons, col) for col, task, metric in cols}
                rows.append({"label": "reference: base model (L0, no RoPE scaling, extrapolating)", "alpha": None,
                             "runs": ["base"], "ok_runs": ok, "cells": cells})
            per_method[mname] = rows
        partial = sorted({t for rows in per_method.values() for row in rows for c in row["cells"].values()
                          for t in (c.get("partial_group") or {}).get("missing", [])})
        note = notes.get(tid, "")
        if partial:
            note += (" " if note else "") + f"Partial group scores here: no value from {', '.join(partial)}."
        if reasons:
            note += ((" " if note else "") + "Not scored (the runs succeeded; the task could not run there): "
                     + "; ".join(f"({i}) {r[:400]}" for i, r in enumerate(reasons, 1)))
        out[tid] = {"title": title, "columns": [c[0] for c in cols], "lower_is_better": lower, "methods": per_method,
                    "note": note}
    return out


def _outcome(cfg: "StudyConfig", tables: Dict[str, Any]) -> Dict[str, Any]:
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


def _provenance(cfg: "StudyConfig", recs: Dict[str, Dict[str, Any]]) -> Tuple[Dict[str, Any], List[str]]:
    """The report's own provenance block, and a Markdown section that also names the runs whose provenance
    (recorded in their result.json when they ran) differs from it in anything but the device."""
    from torchtune_longshort.provenance import provenance, provenance_markdown

    runs = {k: r["provenance"] for k, r in recs.items() if isinstance(r.get("provenance"), dict)}
    prov = provenance(device=str(cfg.eval.device),
                      stdlib=any("stdlib_corpus" in p for p in runs.values()))

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
                    (f"{cell_text(per_c[c]['mean_diff'], per_c[c]['sd_diff'])} ({per_c[c]['n_lower']}/{per_c[c]['n_pairs']} lower)"
                     if per_c[c]["n_pairs"] else "—") for c in cols])
        md += [_md_table(["metric", "method", "alpha"] + cols, body), ""]

    return md


def _runs_markdown(cfg: "StudyConfig", recs: Dict[str, Dict[str, Any]]) -> List[str]:
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
                     (f"{rec.get('stage')}: {rec.get('error')}" if rec.get("status") == "failed" else "")[:300]])
    md += ["Training columns: mean of the last 10 logged steps of the recipe's metrics.jsonl. Entropy: mean "
           f"next-token entropy (nats) at the misalignment task's {L}-token windows; loss columns: mean NLL of the "
           f"{length_label(top)}-token perplexity curve below and from L = {L}. Wall times in seconds.", "",
           _md_table(["run", "status", "train CE", "train misalignment", "entropy", "loss, pos < L", "loss, pos >= L",
                      "train s", "eval s", "error"], body), ""]
    return md


def _wall_markdown(cfg: "StudyConfig", recs: Dict[str, Dict[str, Any]], wall: Optional[float]) -> List[str]:
    """Where the time went: the last invocation, the base's stages, the fine-tunes' mean stages."""
    md = ["## Wall time", ""]
    if wall is not None:
        done = all(r.get("status") != "not run" for r in recs.values())
        md += [f"- the last invocation of the study command: {wall:.0f} s ({wall / 60:.1f} min), "
               f"{cfg.jobs} fine-tune(s) at once"
               + ("" if done else "; it did not finish the grid: runs above are marked not run")]
    base = recs.get("base") or {}
    if base.get("status") == "ok":
        md += [f"- base: training {fmt(base.get('wall_s_train'))} s, evaluation {fmt(base.get('wall_s_eval'))} s "
               "(as recorded by the invocation that wrote its result.json; a stage done by an earlier invocation "
               "is skipped and records about 0 s)"]
    ft = [r for k, r in recs.items() if k != "base" and r.get("status") == "ok"]
    if ft:
        tr, ev = (statistics.mean(float(r.get(f) or 0.0) for r in ft) for f in ("wall_s_train", "wall_s_eval"))
        total = sum(float(r.get("wall_s") or 0.0) for r in ft)
        md += [f"- fine-tunes: {len(ft)} ok, {tr:.0f} s training and {ev:.0f} s evaluation each on average; "
               f"their own clocks sum to {total / 60:.1f} min (runs in parallel overlap)"]
    return md + [""]


def build_report(out: Path, report_dir: Path, cfg: "StudyConfig", wall_s: Optional[float] = None,
                 note: str = "") -> Dict[str, Any]:
    """Write ``report_dir`` (see module docstring) from the run folders under ``out``; returns summary.json's data."""
    out, rdir = Path(out), Path(report_dir)
    rdir.mkdir(parents=True, exist_ok=True)
    recs = load_records(out, cfg)
    # Raw JSON of every run, next to the report, so the links below stay valid when the report is moved.
    for key, rec in recs.items():
        if rec.get("status") == "not run":
            continue
        d = rdir / "runs" / key
        d.mkdir(parents=True, exist_ok=True)
        (d / "result.json").write_text(json.dumps(rec, indent=1, default=str))
        src = out / rec.get("run_dir", "") / "eval"
        files = sorted(src.rglob("results_*.json"), key=lambda p: p.name) if src.is_dir() else []
        if files:
            shutil.copyfile(files[-1], d / "lm_eval_results.json")
    tables = _tables(cfg, recs)
    outcome = _outcome(cfg, tables)
    analysis = analyze(cfg, recs)
    if any(r.get("status") == "ok" for k, r in recs.items() if k != "base"):
        plots = write_plots(cfg, tables, recs, rdir) + claim_plots(cfg, analysis, recs, rdir)
    else:  # no fine-tune to draw (e.g. the base gate refused the grid): only the base's own figure
        plots = claim_plots(cfg, analysis, recs, rdir, base_only=True)
    study_json = out / "study.json"
    wall = wall_s
    if wall is None and study_json.is_file():
        wall = json.loads(study_json.read_text()).get("wall_s_this_invocation")

    md: List[str] = [f"# Study `{cfg.name}`{' (quick variant)' if cfg.quick else ''}", ""]
    md += [f"Config: `{cfg.config_path}`{' --quick' if cfg.quick else ''}. Base: "
           + (f"`{cfg.base.checkpoint_dir}`" if cfg.base.given else
              f"pre-trained here at L0 = {cfg.L0} for {cfg.base.pretrain.max_steps} steps (alpha = 0)")
           + f"; fine-tuned at L = {cfg.L} for {cfg.finetune.max_steps} steps per run; "
           f"methods {list(cfg.methods)}, alphas {cfg.alphas}, seeds {cfg.seeds}.", ""]
    if note:
        md += [note, ""]
    refusal = base_gate_refusal(cfg, recs.get("base", {}))
    if refusal:
        md += [f"**The fine-tuning grid did not run: {refusal}.** The base's failure beyond L0 is under "
               "\"The base model: how it fails beyond L0\" below; every fine-tune row is empty.", ""]
    spread = ("the value of the one seed" if len(cfg.seeds) == 1
              else "mean ± sample sd over seeds (one value: no ±)")
    md += [f"Cells: {spread}; — : no successful run; n/a (note k): the runs succeeded but the task could not run at "
           "that length or had no data, the reason in note k under the table's title. The `runs` column links the "
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
            md += [_md_table(["loss"] + [f"{c}" for c in t["columns"]] + ["runs"], body), ""]

    md += claims_markdown(analysis, cfg)
    md += _outcome_markdown(outcome, tables) + _runs_markdown(cfg, recs)
    md += _wall_markdown(cfg, recs, wall)
    if plots:
        md += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    prov, prov_md = _provenance(cfg, recs)
    md += prov_md
    (rdir / "report.md").write_text("\n".join(md))
    summary = {"name": cfg.name, "quick": cfg.quick, "tables": tables, "outcome": outcome,
               "claims": analysis,
               "runs": {k: {"status": r.get("status"), "stage": r.get("stage"), "error": r.get("error"),
                            "wall_s": r.get("wall_s")} for k, r in recs.items()},
               "plots": plots, "wall_s": wall, "provenance": prov}
    (rdir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary
