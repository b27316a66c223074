"""Run a study: base model, the fine-tune grid through the project's recipe, lm-eval on every checkpoint.

Every step goes through the project's own entry points in a subprocess, exactly as a user would type them:

- training: ``tune run torchtune_longshort/recipes/longshort_finetune.py --config <run>/recipe.yaml [resume=True]``
- evaluation: ``python -m torchtune_longshort.eval run --model longshort ...`` (the installed task pack)
- BABILong data: ``python -m torchtune_longshort.eval.tasks.babilong.generator``

Layout under ``output_dir``::

    base/            recipe.yaml, train/ (the recipe's output_dir), eval/ (lm-eval output), eval_spec.json, result.json
    runs/<key>/      the same per fine-tune, key = <method>_a<alpha>_s<seed>
    babilong_data/   generated once per study
    study.json       the resolved config, wall time, per-run status

Skip / resume: a run whose ``result.json`` says ``ok`` for the same spec is skipped. Otherwise training continues
from the recipe's newest ``step_<k>`` (``resume=True``) or is skipped when ``step_<max_steps>`` exists, unless the
run's ``recipe.yaml`` changed since (then it trains again from step 0); lm-eval is skipped when its results hold every
task and ``eval_spec.json`` says they are of this checkpoint and spec (else ``eval/`` is replaced). A failed run
(non-zero exit, NaN loss, missing output) is
recorded with ``status: failed``, its stage and the tail of its log, and the grid goes on.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from torchtune_longshort.disk_space import is_out_of_space, out_of_space_line
from torchtune_longshort.output_guard import atomic_write_json, read_json
from torchtune_longshort.plural import counted
from torchtune_longshort.provenance import provenance
from torchtune_longshort.study.base_failure import base_failure, base_gate_refusal
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.grid import Run
from torchtune_longshort.study.portable import places, portable, same_spec
from torchtune_longshort.study.run_configs import STUDY_JSON
from torchtune_longshort.study.run_stages import RunStages
from torchtune_longshort.study.stages import (
    StageError, StudyInterrupted, output_folder, run_command, train_summary,
)
from torchtune_longshort.study.stop import run_until_stopped

RESULT = "result.json"


class Study(RunStages):
    """One study: ``run()`` does everything; ``runs()`` lists the fine-tunes; results land in ``output_dir``. What each
    run trains from (its recipe config, the base checkpoint, the tokenizer) is
    :class:`~torchtune_longshort.study.run_configs.RunConfigs`', how each stage runs :class:`RunStages`'.

    Args:
        cfg: a checked study config (``load_study_config``).
        output_dir: overrides ``cfg.output_dir``.
        repo_root: where the recipe and the configs are (default: the current directory).
        executor: ``(argv, log_path, cwd, env, timeout) -> exit code``; the default runs a subprocess. Tests pass
            their own to exercise skip / resume / failure without training.
        log: progress printer.
    """

    def __init__(self, cfg: StudyConfig, output_dir: Optional[str | Path] = None, repo_root: Optional[Path] = None,
                 executor: Callable[..., int] = run_command, log: Callable[[str], None] = print):
        super().__init__(cfg, *output_folder(cfg.output_dir, output_dir, repo_root), executor, log)
        self.jobs = cfg.jobs
        # set once the study is being stopped (Ctrl-C, or a run's stage stopped by SIGINT / SIGTERM)
        self.stopping = threading.Event()

    # ------------------------------------------------------------------ paths and specs
    def runs(self) -> List[Run]:
        return self.cfg.grid

    def uses_stdlib_corpus(self) -> bool:
        """Whether a run reads the stdlib corpus (training data or tokenizer, ppl / misalignment text, haystacks):
        its content hash then goes into the provenance block."""
        def components(node: Any) -> List[str]:
            if isinstance(node, dict):
                return [str(node.get("_component_", ""))] + [c for v in node.values() for c in components(v)]
            return [c for v in node for c in components(v)] if isinstance(node, list) else []

        ev = self.cfg.eval
        sources = [ev.ppl_source, ev.metadata_value("mis_source", "stdlib"), ev.metadata_value("passkey_haystack"),
                   ev.babilong.haystack_name if ev.babilong else None]
        return any(str(s).startswith("stdlib") for s in sources) or any(c.rsplit(".", 1)[-1].startswith("stdlib")
                                          for c in components(self._recipe_base()))

    def provenance(self) -> Dict[str, Any]:
        """The provenance block of this study's files (device: the evaluation's)."""
        return provenance(device=str(self.cfg.eval.device), stdlib=self.uses_stdlib_corpus())

    def spec_of(self, key: str, run: Optional[Run] = None, recipe: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """What a run's result depends on; a result.json with another spec is stale and is redone. A base given as
        ``base.checkpoint_dir`` trains nothing: its checkpoint stands for its recipe config. Its recipe config's
        paths are named by place (:mod:`~torchtune_longshort.study.portable`): records committed on one machine count
        on the next (the eval section's own paths, ``longbench_e_data_dir``, stay as given: the report compares them
        with the config's). ``recipe``: the run's :meth:`recipe_config` where the caller has it already."""
        given = key == "base" and self.cfg.base.given
        trained = {"checkpoint_dir": str(self.base_checkpoint())} if given else \
            recipe if recipe is not None else self.recipe_config(key, run)
        return {"recipe_config": portable(trained, places(self.out, self.root)), "eval_tasks": self.eval_tasks(),
                "eval": {k: v for k, v in self.cfg.eval.as_dict().items() if k != "eval_base"}}

    # ------------------------------------------------------------------ one run
    def run_one(self, key: str, run: Optional[Run] = None, evaluate: bool = True,
                blocked: Optional[str] = None) -> Dict[str, Any]:
        """Train (or skip / resume) and evaluate one run; always writes and returns its result.json record."""
        rdir = self.run_dir(key)
        # the run's recipe config, built once (OmegaConf merges of the whole config: most of a stand-in run's time)
        recipe = None if key == "base" and self.cfg.base.given else self.recipe_config(key, run)
        spec = self.spec_of(key, run, recipe)
        res_path = rdir / RESULT
        if res_path.is_file():
            old = read_json(res_path)  # None when torn or not JSON: the run is done again
            if isinstance(old, dict) and old.get("status") == "ok" \
                    and same_spec(old.get("spec"), spec, places(self.out, self.root)):
                self.log(f"[study] {key}: result.json present (ok), skipped")
                return old
            # the study's record of an earlier attempt (failed, interrupted, another spec's): gone before this one
            # runs, so that a run whose own record cannot be written (a full disk) leaves none for the report to read
            # as this run's, not that one's figures
            res_path.unlink()
        rec: Dict[str, Any] = {"key": key, "kind": "base" if key == "base" else "finetune",
                               "run_dir": str(rdir.relative_to(self.out)), "status": "running", "spec": spec}
        if run is not None:
            rec.update(run.record())
        t0 = time.time()
        stage = "train"
        try:
            if blocked:
                raise StageError("base", blocked)
            trained_now = False
            if key == "base" and self.cfg.base.given:
                ckpt = self.base_checkpoint()
                if not (ckpt / "config.json").is_file():
                    raise StageError("base", f"base.checkpoint_dir={str(ckpt)!r} has no config.json")
            else:
                ckpt, trained_now = self._train(key, run, recipe)
                rec["train"] = train_summary(ckpt.parent)
            rec["checkpoint"] = str(ckpt)
            rec["wall_s_train"] = round(time.time() - t0, 1)
            if evaluate:
                stage, t1 = "eval", time.time()
                self.log(f"[study] {key}: evaluating {counted(len(self.eval_tasks()), 'task')}")
                rec.update(self._eval(key, ckpt, spec, trained_now))
                rec["wall_s_eval"] = round(time.time() - t1, 1)
            rec["status"] = "ok"
        except Exception as e:
            if isinstance(e, StudyInterrupted) or self.stopping.is_set():
                # recorded (a rerun does it again), and the grid stops. A stage that ended while the study was being
                # stopped (SIGINT reaches it and its subprocess alike) was stopped by it, whatever its exit code: a
                # fine-tune stopped while it imports torch exits 1 with a KeyboardInterrupt traceback
                said = e.message if getattr(e, "stage", None) == stage else str(e)  # 'train:' said once
                rec["status"], rec["stage"], rec["error"] = "interrupted", stage, said
                self.log(f"[study] {key}: interrupted at {stage}: {said}")
                self._write_result(res_path, rec, t0)
                if isinstance(e, StudyInterrupted):
                    raise
                raise StudyInterrupted(f"{key} stopped at {stage} ({said})", getattr(e, "signum", 0)) from e
            # recorded, and the grid goes on
            rec["status"], rec["stage"] = "failed", getattr(e, "stage", stage)
            rec["error"] = e.message if isinstance(e, StageError) else \
                out_of_space_line(e) if is_out_of_space(e) else str(e)  # its stage is rec["stage"]: said once
            rec["log_tail"] = getattr(e, "log_tail", "") or traceback.format_exc(limit=5)
            self.log(f"[study] {key}: FAILED at {rec['stage']}: {rec['error']}")
        self._write_result(res_path, rec, t0)
        return rec

    def _write_result(self, res_path: Path, rec: Dict[str, Any], t0: float) -> None:
        rec["wall_s"] = round(time.time() - t0, 1)
        rec["provenance"] = self.provenance()
        res_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(res_path, rec, indent=1, default=str)

    def base_gate(self, base: Dict[str, Any]) -> Optional[str]:
        """Why the fine-tunes must not start, or None (:func:`claims.base_gate_refusal`); logs the base's ratios."""
        if not self.cfg.base.min_ppl_ratio or base.get("status") != "ok":
            return None
        b = base_failure(self.cfg, base)
        if b is not None:
            fmt = lambda x: "n/a" if x is None else f"{x:.3g}"  # noqa: E731
            self.log(f"[study] base: ppl {b['ppl_L0']:.4g} at L0={self.cfg.L0}, {fmt(b['ppl_4L0'])} at 4 L0; "
                     f"ratios: sequence {fmt(b['sequence_ratio'])}, positions {fmt(b['position_ratio'])}, late "
                     f"positions {fmt(b['late_position_ratio'])} (gate on {self.cfg.base.gate_measure}: "
                     f"needed >= {self.cfg.base.min_ppl_ratio})")
        return base_gate_refusal(self.cfg, base)

    # ------------------------------------------------------------------ everything
    def fine_tune_env(self) -> Dict[str, str]:
        """The fine-tunes' subprocess environment: with ``jobs`` > 1 each gets ``cpu_count // jobs`` threads
        (torch's intra-op pool reads OMP_NUM_THREADS), so that parallel runs do not oversubscribe the cores; an
        OMP_NUM_THREADS the study was started with stays the upper bound."""
        if self.jobs <= 1:
            return self.env
        threads = max(1, (os.cpu_count() or 1) // self.jobs)
        if str(self.env.get("OMP_NUM_THREADS", "")).isdigit():
            threads = max(1, min(threads, int(self.env["OMP_NUM_THREADS"])))
        return {**self.env, "OMP_NUM_THREADS": str(threads)}

    def run(self, only: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """Base model, then every grid run (``only``: a subset of keys), ``jobs`` of them at once; writes
        ``study.json``.

        A tqdm bar over the runs (base included) shows the count, elapsed time and ETA; the log lines are written
        above it."""
        from tqdm.auto import tqdm

        t0 = time.time()
        self.claim_output()
        records: Dict[str, Dict[str, Any]] = {}
        runs = [r for r in self.runs() if not only or r.key in only]
        bar = tqdm(total=1 + len(runs), desc="study runs", unit="run", dynamic_ncols=True)
        log, lock = self.log, threading.Lock()

        def above_the_bar(msg: str) -> None:
            with lock, tqdm.external_write_mode():
                log(msg)

        self.log = above_the_bar
        try:
            bar.set_postfix_str("base", refresh=True)
            base = self.run_one("base", None, evaluate=self.cfg.eval.eval_base)
            bar.update(1)
            if base["status"] != "ok" and base.get("stage") == "eval":
                # The base model exists; only its own evaluation failed: the fine-tunes can still run.
                blocked = None
            else:
                blocked = None if base["status"] == "ok" else f"base model unavailable: {base.get('error')}"
            blocked = blocked or self.base_gate(base)
            records["base"] = base
            if self.jobs > 1 and not blocked and runs:
                try:  # shared by every run's evaluation: generated once, before parallel runs would race for it
                    self._babilong_data()
                except StageError as e:
                    self.log(f"[study] BABILong data: {e} (each run's evaluation will report it)")
            env, self.env = self.env, self.fine_tune_env()

            stopping = self.stopping
            stopping.clear()

            def one(i: int, run: Run) -> Optional[Dict[str, Any]]:
                if stopping.is_set():  # interrupted: the runs not started stay to do
                    return None
                self.log(f"[study] ({i}/{len(runs)}) {run.key}  [{time.time() - t0:.0f} s elapsed]")
                try:
                    rec = self.run_one(run.key, run, blocked=blocked)
                except StudyInterrupted:
                    stopping.set()  # here, before this worker takes the next run
                    raise
                with lock:
                    bar.set_postfix_str(run.key, refresh=False)
                    bar.update(1)
                return rec

            try:  # run_one records its own failures; grid order kept
                calls = [partial(one, i, run) for i, run in enumerate(runs, 1)]
                recs, interrupted = run_until_stopped(self.jobs, calls, stopping, stop_errors=(StudyInterrupted,))
            finally:
                self.env = env
            records.update({run.key: rec for run, rec in zip(runs, recs) if rec is not None})
            if interrupted is not None:
                self._write_summary(records, t0)
                raise StudyInterrupted(str(interrupted) or "Ctrl-C", getattr(interrupted, "signum", 0))
        finally:
            bar.close()
            self.log = log
        self._write_summary(records, t0)
        return records

    def _write_summary(self, records: Dict[str, Dict[str, Any]], t0: float) -> None:
        summary = {"name": self.cfg.name, "quick": self.cfg.quick, "config": self.cfg.to_dict(),
                   "wall_s_this_invocation": round(time.time() - t0, 1), "provenance": self.provenance(),
                   "runs": {k: {"status": r["status"], "wall_s": r.get("wall_s"), "error": r.get("error")}
                            for k, r in records.items()}}
        atomic_write_json(self.out / STUDY_JSON, summary, indent=1, default=str)
