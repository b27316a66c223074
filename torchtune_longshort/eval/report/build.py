"""Turn lm-eval results folders into the paper's tables and plots.

    longshort-eval-report results/baseline results/ours --out report/ [--labels base,ours] [--allow-mixed]

(``python -m torchtune_longshort.eval.report`` is the same.) Each run is an lm-eval ``--output_path`` folder (its
``results_<date>.json`` files, and ``<name>_<date>.json`` ones of an ``--output_path <name>.json``, are found
recursively; a task that appears in several files is taken from the newest) or one results file (:mod:`.run_files`).
A folder is one run, i.e. one column: results of different checkpoints or model settings, or of another
``--limit``, ``--metadata`` or n-shot, under one folder are refused (:mod:`.one_run`), never merged. Runs that scored a
task on different numbers of samples (every model counts the samples it could not run, NaN with their reason, so a
difference means other samples), or that differ in the weights' dtype (lm-eval's ``hf`` loads a folder's own
``torch_dtype``, often bf16, where ``longshort`` runs float32), ``--limit``, n-shot, chat template, a task's version or
a setting of the pack's task that changes what it measures (``TaskFamily.measured_by``: BABILong's prompt, the data,
...), are refused in one line naming the task and each run's value unless ``--allow-mixed`` is given; then the report
names them. Writes to ``--out``:

- ``report.md``: the runs (model, checkpoint, dtype, device, ``--limit``, samples per task); one table per length-swept
  task and metric of the pack's registry (rows = runs, columns = lengths: ``longshort_ppl`` perplexity,
  ``longshort_passkey`` accuracy, ``longshort_misalignment`` SCE / Jeffreys / JS) or, for any other task
  (LongBench-E, BABILong, ...), its metrics; then the reason for each value that is NaN or missing (the results
  file's ``not_scored``);
- ``summary.json``: every number in the tables;
- ``ppl_vs_length.png``; ``per_position_loss.csv`` / ``.png`` when lm-eval wrote ``longshort_ppl`` samples with
  per-token values (``--log_samples``, ``longshort`` model; the report names the runs that have none);
- ``heatmap_<task>_<run>.png``: depth x length accuracy for tasks with ``acc_<length>_d<depth>`` metrics
  (``heatmap_<task>_digits_<run>.png``: passkey's ``digits_<length>_d<depth>``, the fraction of digits retrieved)
  (``longshort_passkey``, BABILong's fact-depth variant, see docs/longbench_babilong.md), each cell with the n
  samples it averages (counted from the samples files of ``--log_samples``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from torchtune_longshort.plural import counted
from torchtune_longshort.refusals import (ArgumentParser, quiet_when_the_reader_leaves, refusing, stoppable,
                                          stopped_while_importing, user_path)
from torchtune_longshort.started_as import command_name

with stopped_while_importing(__name__):  # Ctrl-C while torch is imported (seconds): one line, exit 130
    from torchtune_longshort._quiet import quiet_upstream
    from torchtune_longshort.config.inside_input import refuse_inside_input
    from torchtune_longshort.config.values import check_creatable
    from torchtune_longshort.eval.report.figures import PPL_TASK, heatmap_figure, heatmaps, ppl_figure, write_curves
    from torchtune_longshort.eval.report.group_coverage import coverage_note, group_coverage, load_group_subtasks
    from torchtune_longshort.eval.report.results_io import (
        CELL_METRIC, cut_off_samples, even_cell_counts, load_cell_counts, load_curves, load_limit_left_out,
        load_not_scored, load_provenance, load_results, load_run_info, metric_length, predict_only_tasks)
    from torchtune_longshort.eval.model.generation import not_greedy
    from torchtune_longshort.eval.report.run_files import check_scored, run_label
    from torchtune_longshort.eval.report.runs import finite, no_curve_note, runs_section
    from torchtune_longshort.eval.tasks import TASK_FAMILIES, current_name
    from torchtune_longshort.eval.tasks.common.lengths import length_label, per_length
    from torchtune_longshort.plots.axes import table_number
    from torchtune_longshort.made_folders import missing_root, remove_made_folders
    from torchtune_longshort.output_guard import (
        atomic_write_json, atomic_write_text, check_output_folder, read_json, save_figure, undone_on_failure,
    )
    from torchtune_longshort.plots.available import matplotlib_problem
    from torchtune_longshort.provenance import provenance, provenance_markdown

# Length-swept tasks and the metrics the report tabulates by length (each reported as ``<metric>_<length>``): the
# family's table metrics first, then its other metrics (passkey's digits, ppl's token_nll), where a run reports them.
LENGTH_TABLES = {fam.task: fam.table_metrics + tuple(m for m in fam.metrics if m not in fam.table_metrics)
                 for fam in TASK_FAMILIES.values() if fam.table_metrics}


def _fmt(v: Any) -> str:
    if isinstance(v, (int, float)):
        if isinstance(v, float) and math.isnan(v):
            return "NaN"
        return table_number(v)  # as the study's tables: 4 significant digits, large numbers whole
    return "—" if v is None else str(v)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) if i else str(c) for i, c in enumerate(r)) + " |" for r in rows]
    return "\n".join(lines)


def _length_tables(runs: Dict[str, Dict[str, Dict[str, Any]]], sections: List[str], summary: Dict[str, Any]) -> set:
    """One table per length-swept task and metric (rows = runs, columns = the lengths of its ``<metric>_<length>``
    values); returns the tasks it covered."""
    used = set()
    for task, metrics in LENGTH_TABLES.items():
        for metric in metrics:
            lengths = sorted({n for res in runs.values() for k in res.get(task, {})
                              if (n := metric_length(k, metric)) is not None})
            if not lengths:
                continue
            header = ["run"] + [length_label(n) for n in lengths]
            rows = []
            for run, res in runs.items():
                row = [run] + [res.get(task, {}).get(per_length(metric, n)) for n in lengths]
                rows.append(row)
                summary.setdefault(task, {}).setdefault(metric, {})[run] = dict(zip(header[1:], row[1:]))
            sections.append(f"### {task}: {metric} by length (tokens)\n\n" + _table(header, rows))
            used.add(task)
    return used


def _partial_note(run: str, cov: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """The note under a table for a group whose metrics average fewer tasks than it has ("" when none does)."""
    partial = {m: c for m, c in cov.items() if c["missing"]}
    if not partial:
        return "", partial
    missing = sorted({t for c in partial.values() for t in c["missing"]})
    verb, pron = ("averages", "it") if len(partial) == 1 else ("average", "them")
    return (f"Partial group score for `{run}`: {', '.join(sorted(partial))} {verb} only the tasks that reported "
            f"{pron}; no value from {', '.join(missing)}."), partial


# What a task reports about the run rather than the model (``missing_data``): the reasons section says it; in a
# group's table its value was lm-eval's mean over the members that report it (1 for a group 12 of 13 lacked)
DIAGNOSTICS = frozenset(d for family in TASK_FAMILIES.values() for d in family.diagnostics)

# What each depth x length cell metric is, in a heatmap's title and colour bar.
CELL_LABELS = {"acc": "accuracy", "digits": "digits retrieved"}


def _by_length(task: str, key: str) -> bool:
    """Whether ``key`` of ``task`` is in a length table, or a depth x length cell (its heatmap's)."""
    return CELL_METRIC.match(key) is not None or any(metric_length(key, m) is not None
                                                     for m in LENGTH_TABLES.get(task, ()))


def _task_table(task: str, runs: Dict[str, Dict[str, Dict[str, Any]]], coverage: Dict[str, Dict[str, Any]],
                summary: Dict[str, Any], tabled: bool = False) -> Optional[str]:
    """The section of a task's metrics that no length table holds (rows = runs), group coverage noted; ``tabled``:
    the task has length tables, and this section holds its values over all lengths (passkey's acc and digits)."""
    metrics = sorted({m for r in runs.values() for m in r.get(task, {}) if m not in ("alias", "name", "sample_len")
                      and m not in DIAGNOSTICS and not (tabled and _by_length(task, m))})
    if not metrics:
        return None
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
        note, partial = _partial_note(row[0], cov)
        if note:
            notes.append(note)
            summary.setdefault("partial_groups", {}).setdefault(task, {})[row[0]] = partial
    title = f"{task}: over all lengths" if tabled else task
    return f"### {title}\n\n" + _table(header, rows) + "".join("\n\n" + n for n in notes)


def family_tables(runs: Dict[str, Dict[str, Dict[str, Any]]],
                  coverage: Optional[Dict[str, Dict[str, Any]]] = None,
                  not_scored: Optional[Dict[str, Dict[str, str]]] = None) -> Tuple[List[str], Dict[str, Any]]:
    """Markdown sections and their numbers: length tables, then every other task, then the reasons for values
    that are NaN or missing (``not_scored``: ``{run: {task: reasons}}``, :func:`results_io.load_not_scored`).

    ``coverage`` (``{run: group_coverage(...)}``): a group score that averages fewer tasks than the group has is
    printed as ``value (k/n tasks)``, with the missing tasks listed under its table."""
    sections: List[str] = []
    summary: Dict[str, Any] = {}
    used = _length_tables(runs, sections, summary)
    for task in sorted({t for r in runs.values() for t in r}):
        section = _task_table(task, runs, coverage or {}, summary, tabled=task in used)
        if section:
            sections.append(section)
    errors = {run: dict(sorted(e.items())) for run, e in (not_scored or {}).items() if e}
    if errors:
        summary["errors"] = errors
        lines = [f"- `{run}` / `{task}`: {reason}" for run, e in errors.items() for task, reason in e.items()]
        sections.append("### Not scored (NaN or no value), with the reason\n\n" + "\n".join(lines))
    return sections, summary


def build_report(results_dirs: Sequence[Path], out_dir: Path, labels: Optional[Sequence[str]] = None,
                 allow_mixed: bool = False, allow_unequal_samples: bool = False) -> Dict[str, Any]:
    """Write ``report.md``, ``summary.json`` and the plots; returns the summary dict (with ``files``).
    ``allow_mixed`` (``allow_unequal_samples`` is its older name): report runs that differ in dtype, ``--limit`` or
    sample counts side by side, marked, instead of refusing them."""
    results_dirs = [Path(d) for d in results_dirs]
    if labels is not None and len(labels) != len(results_dirs):
        raise ValueError(f"labels={list(labels)} has {len(labels)} names for {len(results_dirs)} results folders")
    names = [str(n).strip() for n in labels] if labels else [run_label(d) for d in results_dirs]
    if labels and not all(names):  # an empty name headed a blank row (--labels ',b')
        raise ValueError(f"--labels {','.join(labels)!r} holds an empty name: give each run one")
    if len(set(names)) != len(names):
        fix = "give each run its own" if labels else "pass --labels with a name for each run"
        raise ValueError(f"run labels {names} are not unique: {fix}")
    for d in results_dirs:
        check_scored(d)
    refuse_inside_input("--out", out_dir, [("the results folder", d) for d in results_dirs], "the report",
                        "which this report reads")  # a report among lm-eval's files: in the run it reads
    check_out_dir(Path(out_dir))
    runs = {name: load_results(d) for name, d in zip(names, results_dirs)}
    outputs_only = {name: tasks for name, d in zip(names, results_dirs) if (tasks := predict_only_tasks(d))}
    if len(outputs_only) == len(names):
        tasks = ", ".join(sorted({t for ts in outputs_only.values() for t in ts}))
        raise ValueError(f"{'every run' if len(names) > 1 else 'the run'} given was lm-eval --predict_only (tasks "
                         f"{tasks}: outputs in the samples files, no scores): nothing to report; evaluate without "
                         "--predict_only")
    infos = {name: load_run_info(d) for name, d in zip(names, results_dirs)}
    not_scored = {name: load_not_scored(d) for name, d in zip(names, results_dirs)}
    runs_table, run_notes = runs_section(names, results_dirs, infos, allow_mixed or allow_unequal_samples)
    cut_off = {name: files for name, d in zip(names, results_dirs)
               if (files := cut_off_samples(d, infos[name]["samples"]))}
    run_notes += [f"Samples of `{name}` cut off (a kill or a full disk while lm-eval wrote them): "
                  f"{'; '.join(files)}. Its per-position curve and depth x length counts use the readable ones; "
                  "evaluate it again with --log_samples for all." for name, files in cut_off.items()]
    run_notes += [f"`{name}` was run with lm-eval's --predict_only ({', '.join(tasks)}): outputs, no scores, so no "
                  "cell of it below; evaluate it without --predict_only for them."
                  for name, tasks in outputs_only.items()]
    # cells --limit never ran: absent from every table and heatmap below, and the eval's closing line said so
    left_out = {name: left for name, d in zip(names, results_dirs) if (left := load_limit_left_out(d))}
    run_notes += [f"`{name}` / `{task}`: --limit left without a document {', '.join(cells)} (no value of them "
                  "below; a larger --limit, at least the task's number of cells, runs each)"
                  for name, tasks in left_out.items() for task, cells in tasks.items()]
    run_notes += [f"`{name}` read text its checkpoint's run trained on: {line}"
                  for name, info in infos.items() for line in info.get("trained_text_overlap") or ()]
    # the longshort model of versions before 2026-12-05 ran gen_kwargs it cannot honour as plain greedy, unsaid
    run_notes += [f"`{name}` asked --gen_kwargs {', '.join(f'{k}={v}' for k, v in info['gen_kwargs'].items())}, "
                  "which the longshort model does not decode with (it decodes plain greedy): versions before "
                  "2026-12-05 ran its generation tasks greedy without a word (this one refuses them), so their "
                  "scores below are greedy's; evaluate it again without them, or with --model hf"
                  for name, info in infos.items()
                  if info.get("model") == "longshort" and not_greedy(info.get("gen_kwargs") or {})]
    coverage = {name: group_coverage(runs[name], load_group_subtasks(d)) for name, d in zip(names, results_dirs)}
    sections, summary = family_tables(runs, coverage, not_scored)
    if left_out:
        summary["limit_left_out"] = left_out
    out_dir = Path(out_dir)
    made = missing_root(out_dir)  # a stop or a full disk takes back the folders this report made (it left them empty)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary["runs"] = infos
    summary["samples_cut_off"] = cut_off
    # a full disk part-way: nothing of this run is left; an earlier report's figures this one does not draw go
    try:
        with undone_on_failure(out_dir, REPORT_FILE_PATTERNS, replaces=_earlier_files(out_dir) or ()):
            _write_report(out_dir, names, results_dirs, runs, summary, runs_table, run_notes, sections)
    except BaseException:
        remove_made_folders(out_dir, made)
        raise
    return summary


def _write_report(out_dir: Path, names, results_dirs, runs, summary, runs_table, run_notes, sections) -> None:
    """The figures, ``report.md``, and ``summary.json`` last (it lists the files, so that a rerun may replace them),
    each written whole."""
    files, curve_notes = _figures(runs, dict(zip(names, results_dirs)), out_dir, summary)

    run_prov = {name: load_provenance(d) for name, d in zip(names, results_dirs)}
    prov = provenance(stdlib=any("stdlib_corpus" in (p or {}) for p in run_prov.values()))
    summary["provenance"] = prov
    summary["run_provenance"] = run_prov
    md = ["# Evaluation report", "", "## Runs", "", runs_table, ""] + [n + "\n" for n in run_notes + curve_notes]
    md += [s + "\n" for s in sections]
    pngs = [f for f in files if f.endswith(".png")]
    md += ["Figures: " + ", ".join(f"[{f}]({f})" for f in pngs), ""] if pngs else []
    md += ["## Provenance", "", "Report built by:", "", provenance_markdown(prov), ""]
    for name, p in run_prov.items():
        md += [f"Run `{name}`:", "", provenance_markdown(p) if p else NOT_RECORDED, ""]
    atomic_write_text(out_dir / "report.md", "\n".join(md) + "\n")
    summary["files"] = ["report.md", "summary.json", *files]
    atomic_write_json(out_dir / "summary.json", summary, indent=2, default=str)


# a run whose results carry no provenance block: stock lm-eval wrote them (longshort-eval records it for every model)
NOT_RECORDED = ("- not recorded: its results were written by stock lm-eval (`lm_eval` / `lm-eval run`, or a "
                "longshort-eval older than this record), which records no provenance; evaluate through `longshort-eval "
                "run` (any --model) to record it")


REPORT_FILE_PATTERNS = ("report.md", "summary.json", "ppl_vs_length.png", "per_position_loss.*", "heatmap_*.png")


# what an earlier report's summary.json holds besides its "files": another tool's summary.json with a "files" list
# was taken for a report's, and the files it listed (a user's report.md, heatmap_*.png) were overwritten or deleted
SUMMARY_KEYS = ("files", "runs", "provenance")


def _earlier_files(folder: Path) -> Optional[List[str]]:
    """The files an earlier report in ``folder`` wrote, as its ``summary.json`` lists them; None when there is none
    (a ``summary.json`` without :data:`SUMMARY_KEYS` is not a report's)."""
    summary = read_json(folder / "summary.json")
    ours = isinstance(summary, dict) and all(k in summary for k in SUMMARY_KEYS)
    files = summary.get("files") if ours else None
    return [f for f in files if isinstance(f, str)] if isinstance(files, list) else None


def check_out_dir(out_dir: Path) -> None:
    """An ``--out`` the report may write: a rerun replaces only what an earlier report there wrote (its
    ``summary.json`` lists it), never a user's file."""
    check_output_folder(out_dir, "--out", REPORT_FILE_PATTERNS, lambda folder: _earlier_files(folder) or False)
    check_creatable("--out", str(out_dir), writable=True)


def _prog() -> str:  # the command's name in its lines: as it was started (started_as.command_name)
    return command_name("torchtune_longshort.eval.report.build")


def _figures(runs: Dict[str, Dict[str, Dict[str, Any]]], dirs: Dict[str, Path], out_dir: Path,
             summary: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    """Draw the report's figures; ``(file names, notes)``: a run with perplexity but no per-position curve is named
    with the reason (:func:`runs.no_curve_note`), not silently left out of the curve plot."""
    files: List[str] = []
    no_plots = matplotlib_problem()  # a declared dependency; an environment without it still gets its tables, CSV
    if no_plots is not None:
        no_plots = f"No figures: {no_plots} and rerun the same command to draw them."
        print(f"[{_prog()}] {no_plots}", file=sys.stderr)
    fig = ppl_figure(runs) if no_plots is None else None
    if fig is not None:
        save_figure(fig, out_dir / "ppl_vs_length.png", dpi=120)
        files.append("ppl_vs_length.png")
    curves = {name: load_curves(d) for name, d in dirs.items()}
    notes = [no_curve_note(run, runs[run].get(PPL_TASK, {}), summary["runs"][run], dirs[run], PPL_TASK)
             for run, c in curves.items() if not c and finite(runs[run].get(PPL_TASK, {}).values())]
    if no_plots is not None:
        notes.insert(0, no_plots)
    elif fig is None and any(PPL_TASK in r for r in runs.values()):  # the task ran, and no figure: say why
        notes.insert(0, f"No `ppl_vs_length.png`: no run has a finite {PPL_TASK} perplexity at any length (the "
                        "reasons: \"Not scored\" below).")
    curves = {k: v for k, v in curves.items() if v}
    if curves:
        write_curves(curves, out_dir, png=no_plots is None)
        files += ["per_position_loss.csv"] + (["per_position_loss.png"] if no_plots is None else [])
        summary["per_position_mean_nll"] = {
            run: {str(L): sum(c) / len(c) for L, c in by.items()} for run, by in curves.items()
        }
    counts = {run: load_cell_counts(d) for run, d in dirs.items()}
    for (family, run, metric), grid in (heatmaps(runs) if no_plots is None else {}).items():
        what = CELL_LABELS.get(metric, metric)
        name = f"heatmap_{family}{'' if metric == 'acc' else '_' + metric}_{run}.png".replace("/", "_")
        title, n = f"{family}: {what} by depth x length ({run})", counts[run].get(current_name(family))
        if not n:  # without samples files: the task's samples over its cells, when they divide evenly
            info = summary["runs"][run]
            n = even_cell_counts(info["samples"].get(current_name(family)), info["limit"],
                                 [(lab, d) for (_, lab), row in grid.items() for d in row])
            title += f" (n per cell: the task's {info['samples'].get(current_name(family))} samples over its " \
                     f"{counted(len(n), 'cell')})" if n else ""
        save_figure(heatmap_figure(grid, title, n, what), out_dir / name, dpi=120)
        files.append(name)
    return files, notes


def stopped_line(out_dir: Path) -> str:
    """What a report stopped (Ctrl-C, SIGTERM) while it writes into ``out_dir`` leaves there
    (:func:`~torchtune_longshort.output_guard.undone_on_failure` takes back what it wrote), for the stop's line."""
    if not out_dir.exists():
        return (f"nothing is kept: --out {str(out_dir)!r} did not exist, and it is removed with what was written there "
                "(and the folders made for it); rerun the same command")
    if not _earlier_files(out_dir):
        return (f"--out {str(out_dir)!r} holds what it held before: the files this report wrote there are removed; "
                "rerun the same command")
    return (f"the files this report added to --out {str(out_dir)!r} are removed; the earlier report's files there "
            "that it had written again by then hold this report's version, each whole, the others the earlier "
            "report's; rerun the same command")


@quiet_when_the_reader_leaves
def main(argv: Optional[Sequence[str]] = None) -> None:
    """CLI entry point."""
    quiet_upstream()  # before matplotlib is imported: its lines about a temporary folder come at its import
    prog = _prog()
    ap = ArgumentParser(prog=prog, description=__doc__.split("\n")[0], examples=[
        f"{prog} results/base results/ours --labels base,ours --out report/",
        f"{prog} results/hf_res.json results/ls_res.json --out report/   # --output_path <name>.json"])
    ap.add_argument("results_dirs", nargs="+", type=Path,
                    help="lm-eval --output_path folders or <name>.json as given, or results files (<name>_<date>.json "
                         "of an --output_path <name>.json, results_<date>.json), one per run")
    ap.add_argument("--out", type=lambda v: Path(user_path(v)), required=True,
                    help="folder for report.md, summary.json and plots")
    ap.add_argument("--labels", default=None, help="comma-separated run names (default: folder names)")
    ap.add_argument("--allow-mixed", "--allow-unequal-samples", dest="allow_mixed", action="store_true",
                    help="report runs that differ in dtype, --limit, a --samples subset, n-shot, chat template, a "
                         "task's version or a setting that changes what it measures (babilong_prompt, its data, ...), "
                         "or scored a task on different numbers of samples, side by side with the differences named, "
                         "instead of refusing them")
    args = ap.parse_args(argv)
    summary = stoppable(ap.prog, lambda: refusing(ap.prog, lambda: build_report(
        args.results_dirs, args.out, args.labels.split(",") if args.labels else None, allow_mixed=args.allow_mixed)),
        stopped_line(args.out))

    def show() -> None:
        print((args.out / "report.md").read_text())
        print("wrote:", ", ".join(str(args.out / f) for f in summary["files"]))

    stoppable(ap.prog, show, f"the report is whole in --out {str(args.out)!r}; only its printing here was cut short")


if __name__ == "__main__":
    main()
