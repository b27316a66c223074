"""Turn lm-eval results folders into the paper's tables and plots.

    python -m torchtune_longshort.eval.report results/baseline results/ours --out report/ [--labels base,ours]

Each folder is an lm-eval ``--output_path`` (its ``results_*.json`` files are found recursively; a task that
appears in several files is taken from the newest). A folder is one run, i.e. one column: results of different
checkpoints or model settings under one folder are refused (:func:`run_identity`), never merged. Writes to ``--out``:

- ``report.md``: one table per task family, rows = runs, columns = lengths (``long_ppl`` perplexity,
  ``longshort_passkey`` accuracy, ``misalignment`` SCE / Jeffreys / JS) or, for any other task (LongBench-E,
  BABILong, ...), its metrics; then the reason for each value that is NaN or missing (the results' ``error``);
- ``summary.json``: every number in the tables;
- ``ppl_vs_length.png``; ``per_position_loss.csv`` / ``.png`` when lm-eval wrote ``long_ppl`` samples
  (``--log_samples``, ``longshort`` model);
- ``heatmap_<task>_<run>.png``: depth x length accuracy for ``longshort_passkey`` (``acc_depth_<d>`` of
  ``longshort_passkey_<L>``) and for tasks with ``acc_<len>_d<depth>`` metrics (BABILong fact-depth variant, see
  docs/longbench_babilong.md).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from torchtune_longshort.eval.unavailable import ERROR_METRIC

_LEN = re.compile(r"^(\d+)(k?)$")
_FAMILIES = {"long_ppl": ("ppl",), "longshort_passkey": ("acc",), "misalignment": ("sce", "jeffreys", "js")}
_PASSKEY = "longshort_passkey_"


def length_label(n: int) -> str:
    """Token count -> the label the task pack uses in task names: 512 -> ``"512"``, 1024 -> ``"1k"``."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def length_tokens(label: str) -> Optional[int]:
    """``"4k"`` -> 4096, ``"512"`` -> 512, anything else -> None."""
    m = _LEN.match(label)
    if not m:
        return None
    return int(m.group(1)) * (1024 if m.group(2) else 1)


# model_args that change how fast a run goes, not its numbers
_NOT_IDENTITY = frozenset({"batch_size", "max_batch_size", "device", "trust_remote_code", "parallelize"})


def run_identity(data: Dict[str, Any]) -> Dict[str, Any]:
    """What one column of a report stands for, from a ``results_*.json``'s ``config``: the lm-eval model, its
    model_args (``checkpoint_dir`` read as ``pretrained``; batch size and device left out) and, for the
    ``longshort`` model, the checkpoint's content fingerprint (``checkpoint_fingerprint``)."""
    from lm_eval.utils import simple_parse_args_string

    config = data.get("config") or {}
    args = config.get("model_args") or {}
    if isinstance(args, str):
        args = simple_parse_args_string(args)
    args = {k: str(v) for k, v in args.items() if k not in _NOT_IDENTITY}
    if "checkpoint_dir" in args:
        args.setdefault("pretrained", args.pop("checkpoint_dir"))
    if "pretrained" in args:
        args["pretrained"] = args["pretrained"].rstrip("/") or "/"
    ident: Dict[str, Any] = {"model": config.get("model"), "model_args": dict(sorted(args.items()))}
    if config.get("checkpoint_fingerprint"):
        ident["checkpoint_fingerprint"] = config["checkpoint_fingerprint"]
    return ident


def _results_files(results_dir: Path) -> List[Path]:
    files = sorted(Path(results_dir).rglob("results_*.json"), key=lambda p: p.name)
    if not files:
        raise FileNotFoundError(f"results_dir={str(results_dir)!r} holds no lm-eval results_*.json file")
    return files


def check_one_run(results_dir: Path) -> Dict[str, Any]:
    """The :func:`run_identity` shared by every ``results_*.json`` under ``results_dir``; raises ``ValueError``
    naming two files and the differing fields when they come from different checkpoints or model settings
    (checkpoint fingerprints are compared where both files have one: older results files lack it)."""
    first: Optional[Tuple[Path, Dict[str, Any]]] = None
    for f in _results_files(results_dir):
        ident = run_identity(json.loads(f.read_text()))
        if first is None:
            first = (f, ident)
            continue
        f0, a = first
        diff = [f"model: {a['model']!r} vs {ident['model']!r}"] if a["model"] != ident["model"] else []
        keys = sorted(a["model_args"].keys() | ident["model_args"].keys())
        diff += [f"{k}: {a['model_args'].get(k)!r} vs {ident['model_args'].get(k)!r}"
                 for k in keys if a["model_args"].get(k) != ident["model_args"].get(k)]
        fa, fb = a.get("checkpoint_fingerprint"), ident.get("checkpoint_fingerprint")
        if fa and fb and fa != fb:
            diff.append(f"checkpoint content: fingerprint {fa} vs {fb} (the checkpoint folder was rewritten "
                        "between the two evaluations)")
        if diff:
            raise ValueError(
                f"results_dir={str(results_dir)!r} mixes results of different checkpoints / model settings, which "
                f"would be merged into one report column: {'; '.join(diff)} ({f0} and {f}). Give each run its own "
                "--output_path folder, or pass the subfolder of one run (lm-eval writes "
                "<output_path>/<checkpoint path>/results_*.json)"
            )
        if fb and not fa:
            first = (f0, {**a, "checkpoint_fingerprint": fb})
    return first[1] if first else {}


def load_results(results_dir: Path) -> Dict[str, Dict[str, Any]]:
    """``{task: {metric: value}}`` from every ``results_*.json`` under ``results_dir`` (newest file wins per task;
    keys drop lm-eval's ``,none`` filter suffix; stderr entries are dropped). The files must all come from one
    run (:func:`check_one_run`: same model, model_args and checkpoint), else ``ValueError``."""
    files = _results_files(results_dir)
    check_one_run(results_dir)
    out: Dict[str, Dict[str, Any]] = {}
    for f in files:  # oldest first, so newer files overwrite
        data = json.loads(f.read_text())
        for task, metrics in data.get("results", {}).items():
            clean = {}
            for key, value in metrics.items():
                if "," not in key or "_stderr" in key:
                    continue
                name, filt = key.split(",", 1)
                clean[name if filt == "none" else f"{name},{filt}"] = value
            out[task] = clean
    return out


def load_group_subtasks(results_dir: Path) -> Dict[str, List[str]]:
    """``{group: [direct subtasks]}`` from lm-eval's ``group_subtasks`` in every ``results_*.json`` (newest wins)."""
    out: Dict[str, List[str]] = {}
    for f in sorted(Path(results_dir).rglob("results_*.json"), key=lambda p: p.name):
        out.update(json.loads(f.read_text()).get("group_subtasks") or {})
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def group_coverage(results: Dict[str, Dict[str, Any]], group_subtasks: Dict[str, List[str]]) -> Dict[str, Any]:
    """How many leaf tasks each group score averages: ``{group: {metric: {"present", "missing", "total"}}}``.

    lm-eval averages a group metric over the subtasks that report it, so a group whose datasets are partly missing
    (LongBench-E without some files, BABILong with some QA tasks not generated) scores what is there; ``present``
    and ``missing`` name the leaf tasks (nested groups flattened) that did and did not report ``metric``.
    """

    def leaves(group: str, seen=()) -> List[str]:
        out: List[str] = []
        for t in group_subtasks.get(group, []):
            out += leaves(t, seen + (group,)) if t in group_subtasks and t not in seen else [t]
        return out

    cov: Dict[str, Any] = {}
    for group in group_subtasks:
        if group not in results:
            continue
        tasks = leaves(group)
        for metric, value in results[group].items():
            if metric == "missing_data" or not _number(value):
                continue
            present = [t for t in tasks if _number(results.get(t, {}).get(metric))]
            cov.setdefault(group, {})[metric] = {"present": present, "missing": [t for t in tasks if t not in present],
                                                 "total": len(tasks)}
    return cov


def coverage_note(cov: Optional[Dict[str, Any]]) -> str:
    """`` (k/n tasks)`` when a group score averages fewer than all of its tasks, else ``""``."""
    if not cov or not cov["missing"]:
        return ""
    return f" ({len(cov['present'])}/{cov['total']} tasks)"


def load_provenance(results_dir: Path) -> Optional[Dict[str, Any]]:
    """The provenance block the ``longshort`` model put in the newest ``results_*.json`` (None: another model)."""
    files = sorted(Path(results_dir).rglob("results_*.json"), key=lambda p: p.name)
    for f in reversed(files):
        prov = (json.loads(f.read_text()).get("config") or {}).get("provenance")
        if isinstance(prov, dict):
            return prov
    return None


def load_curves(results_dir: Path) -> Dict[int, List[float]]:
    """Per-position mean NLL per ``long_ppl`` length from lm-eval samples files (newest per task)."""
    from torchtune_longshort.eval.long_ppl import position_curve

    newest: Dict[str, Path] = {}
    for f in sorted(Path(results_dir).rglob("samples_long_ppl_*.jsonl"), key=lambda p: p.name):
        task = re.match(r"samples_(long_ppl_[^_]+)_", f.name)
        if task:
            newest[task.group(1)] = f
    curves: Dict[int, List[float]] = {}
    for task, f in newest.items():
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        per_doc = [r.get("curve_mean_nll") for r in rows]
        curve = position_curve(per_doc) if per_doc else []
        length = length_tokens(task[len("long_ppl_") :])
        if curve and length:
            curves[length] = curve
    return curves


def _fmt(v: Any) -> str:
    if isinstance(v, (int, float)):
        if isinstance(v, float) and math.isnan(v):
            return "NaN"
        return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return "—" if v is None else str(v)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) if i else str(c) for i, c in enumerate(r)) + " |" for r in rows]
    return "\n".join(lines)


def family_tables(runs: Dict[str, Dict[str, Dict[str, Any]]],
                  coverage: Optional[Dict[str, Dict[str, Any]]] = None) -> Tuple[List[str], Dict[str, Any]]:
    """Markdown sections and their numbers: length-indexed families, then every other task.

    ``coverage`` (``{run: group_coverage(...)}``): a group score that averages fewer tasks than the group has is
    printed as ``value (k/n tasks)``, with the missing tasks listed under its table."""
    coverage = coverage or {}
    sections, summary = [], {}
    used = set()
    for fam, metrics in _FAMILIES.items():
        lengths = sorted(
            {
                (length_tokens(t[len(fam) + 1 :]), t[len(fam) + 1 :])
                for r in runs.values()
                for t in r
                if t.startswith(fam + "_") and length_tokens(t[len(fam) + 1 :])
            }
        )
        if not lengths:
            continue
        for metric in metrics:
            header = ["run"] + [lab for _, lab in lengths]
            rows = []
            for run, res in runs.items():
                row = [run] + [res.get(f"{fam}_{lab}", {}).get(metric) for _, lab in lengths]
                rows.append(row)
                summary.setdefault(fam, {}).setdefault(metric, {})[run] = dict(zip(header[1:], row[1:]))
            sections.append(f"### {fam}: {metric} by length (tokens)\n\n" + _table(header, rows))
        used |= {f"{fam}_{lab}" for _, lab in lengths}
    others = sorted({t for r in runs.values() for t in r} - used)
    for task in others:
        metrics = sorted({m for r in runs.values() for m in r.get(task, {})
                          if m not in ("alias", "name", "sample_len", ERROR_METRIC)})
        if not metrics:
            continue
        header = ["run"] + metrics
        rows = [[run] + [res.get(task, {}).get(m) for m in metrics] for run, res in runs.items()]
        summary.setdefault("tasks", {})[task] = {r[0]: dict(zip(metrics, r[1:])) for r in rows}
        notes = []
        for row in rows:
            cov = coverage.get(row[0], {}).get(task, {})
            for i, m in enumerate(metrics, 1):
                note = coverage_note(cov.get(m))
                if note and row[i] is not None:
                    row[i] = _fmt(row[i]) + note
            partial = {m: c for m, c in cov.items() if c["missing"]}
            if partial:
                missing = sorted({t for c in partial.values() for t in c["missing"]})
                one = len(partial) == 1
                verb, pron = ("averages", "it") if one else ("average", "them")
                notes.append(f"Partial group score for `{row[0]}`: {', '.join(sorted(partial))} {verb} only the "
                             f"tasks that reported {pron}; no value from {', '.join(missing)}.")
                summary.setdefault("partial_groups", {}).setdefault(task, {})[row[0]] = partial
        sections.append(f"### {task}\n\n" + _table(header, rows) + "".join("\n\n" + n for n in notes))
    errors = {run: {t: m[ERROR_METRIC] for t, m in sorted(res.items()) if m.get(ERROR_METRIC)} for run, res in runs.items()}
    errors = {run: e for run, e in errors.items() if e}
    if errors:
        summary["errors"] = errors
        lines = [f"- `{run}` / `{task}`: {reason}" for run, e in errors.items() for task, reason in e.items()]
        sections.append("### Not scored (NaN or no value), with the reason\n\n" + "\n".join(lines))
    return sections, summary


def heatmaps(runs: Dict[str, Dict[str, Dict[str, Any]]]) -> Dict[Tuple[str, str], Dict[Tuple[int, str], Dict[int, float]]]:
    """``{(family, run): {(length_tokens, length_label): {depth: acc}}}`` for passkey and ``acc_<len>_d<depth>``."""
    out: Dict[Tuple[str, str], Dict[Tuple[int, str], Dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    pat = re.compile(r"^acc_(\w+?)_d(\d+)$")
    for run, res in runs.items():
        for task, metrics in res.items():
            if task.startswith(_PASSKEY) and length_tokens(task[len(_PASSKEY) :]):
                lab = task[len(_PASSKEY) :]
                for m, v in metrics.items():
                    if m.startswith("acc_depth_") and isinstance(v, (int, float)):
                        out[("longshort_passkey", run)][(length_tokens(lab), lab)][int(m[10:])] = float(v)
            for m, v in metrics.items():
                mm = pat.match(m)
                if mm and length_tokens(mm.group(1)) is not None and isinstance(v, (int, float)):
                    lab = mm.group(1)
                    out[(task, run)][(length_tokens(lab), lab)][int(mm.group(2))] = float(v)
    return out


def heatmap_figure(grid: Dict[Tuple[int, str], Dict[int, float]], title: str):
    """Depth x length accuracy heatmap (``{(length_tokens, label): {depth: acc}}``) as a matplotlib Figure.

    One row or one column keeps readable cells (:func:`plot_axes.heatmap_size`) and the title is wrapped to the
    figure's width, so neither is squeezed nor clipped."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import heatmap_size, wrapped_title

    lengths = sorted(grid)
    depths = sorted({d for row in grid.values() for d in row})
    data = [[grid[L].get(d, float("nan")) for L in lengths] for d in depths]
    size = heatmap_size(len(lengths), len(depths))
    fig = Figure(figsize=size, layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(data, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(lengths)), [lab for _, lab in lengths])
    ax.set_yticks(range(len(depths)), [f"{d}%" for d in depths])
    ax.set_xlabel("context length")
    ax.set_ylabel("depth")
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.suptitle(wrapped_title(title, size[0]), fontsize=9)
    fig.colorbar(im, ax=ax, label="accuracy")
    return fig


def ppl_figure(runs: Dict[str, Dict[str, Dict[str, Any]]]):
    """Perplexity against length, one line per run (None when no run has a ``long_ppl_<L>`` value).

    Lengths get one labelled tick each; perplexity goes on a log axis only when it spans a decade
    (:func:`plot_axes.value_axis`), with plain-number tick labels and no offset."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import length_axis, value_axis

    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    xs, ys = [], []
    for run, res in runs.items():
        pts = sorted(
            (length_tokens(t[9:]), v["ppl"])
            for t, v in res.items()
            if t.startswith("long_ppl_") and length_tokens(t[9:]) and isinstance(v.get("ppl"), (int, float))
        )
        pts = [(x, y) for x, y in pts if math.isfinite(y)]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=run)
            xs += [x for x, _ in pts]
            ys += [y for _, y in pts]
    if not xs:
        return None
    length_axis(ax, xs)
    value_axis(ax, ys)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("perplexity")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def build_report(results_dirs: Sequence[Path], out_dir: Path, labels: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Write ``report.md``, ``summary.json`` and the plots; returns the summary dict (with ``files``)."""
    results_dirs = [Path(d) for d in results_dirs]
    if labels is not None and len(labels) != len(results_dirs):
        raise ValueError(f"labels={list(labels)} has {len(labels)} names for {len(results_dirs)} results folders")
    names = list(labels) if labels else [d.name for d in results_dirs]
    if len(set(names)) != len(names):
        raise ValueError(f"run labels {names} are not unique: pass --labels")
    runs = {name: load_results(d) for name, d in zip(names, results_dirs)}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    coverage = {name: group_coverage(runs[name], load_group_subtasks(d)) for name, d in zip(names, results_dirs)}
    sections, summary = family_tables(runs, coverage)
    files: List[str] = []
    fig = ppl_figure(runs)
    if fig is not None:
        fig.savefig(out_dir / "ppl_vs_length.png", dpi=120)
        files.append("ppl_vs_length.png")
    curves = {name: load_curves(d) for name, d in zip(names, results_dirs)}
    curves = {k: v for k, v in curves.items() if v}
    if curves:
        from torchtune_longshort.eval.long_ppl import write_curves

        write_curves(curves, out_dir)
        files += ["per_position_loss.csv", "per_position_loss.png"]
        summary["per_position_mean_nll"] = {
            run: {str(L): sum(c) / len(c) for L, c in by.items()} for run, by in curves.items()
        }
    for (family, run), grid in heatmaps(runs).items():
        name = f"heatmap_{family}_{run}.png".replace("/", "_")
        heatmap_figure(grid, f"{family}: accuracy by depth x length ({run})").savefig(out_dir / name, dpi=120)
        files.append(name)
    from torchtune_longshort.provenance import provenance, provenance_markdown

    run_prov = {name: load_provenance(d) for name, d in zip(names, results_dirs)}
    prov = provenance(stdlib=any("stdlib_corpus" in (p or {}) for p in run_prov.values()))
    summary["provenance"] = prov
    summary["run_provenance"] = run_prov
    md = ["# Evaluation report", "", "Runs: " + ", ".join(f"`{n}` ({d})" for n, d in zip(names, results_dirs)), ""]
    md += [s + "\n" for s in sections]
    md += ["Figures: " + ", ".join(f"[{f}]({f})" for f in files if f.endswith(".png")), ""] if files else []
    md += ["## Provenance", "", "Report built by:", "", provenance_markdown(prov), ""]
    for name, p in run_prov.items():
        md += [f"Run `{name}`:", "", provenance_markdown(p) if p else "- not recorded (results not written by the "
               "`longshort` model)", ""]
    (out_dir / "report.md").write_text("\n".join(md) + "\n")
    summary["files"] = ["report.md", "summary.json", *files]
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def main(argv: Optional[Sequence[str]] = None) -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(prog="python -m torchtune_longshort.eval.report", description=__doc__.split("\n")[0])
    ap.add_argument("results_dirs", nargs="+", type=Path, help="lm-eval --output_path folders (one per run)")
    ap.add_argument("--out", type=Path, required=True, help="folder for report.md, summary.json and plots")
    ap.add_argument("--labels", default=None, help="comma-separated run names (default: folder names)")
    args = ap.parse_args(argv)
    summary = build_report(args.results_dirs, args.out, args.labels.split(",") if args.labels else None)
    print((args.out / "report.md").read_text())
    print("wrote:", ", ".join(str(args.out / f) for f in summary["files"]))


if __name__ == "__main__":
    main()
