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
task and ``eval_spec.json`` says they are of this checkpoint and spec (else ``eval/`` is replaced). A failed run (non-zero exit, NaN loss, missing output) is
recorded with ``status: failed``, its stage and the tail of its log, and the grid goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf

from torchtune_longshort.eval.report.results_io import (group_coverage, load_curves, load_group_subtasks,
                                                        load_not_scored, load_results)
from torchtune_longshort.eval.tasks import TASK_FAMILIES
from torchtune_longshort.provenance import provenance
from torchtune_longshort.study.base_failure import base_failure, base_gate_refusal
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.eval_config import FAMILY_TASK
from torchtune_longshort.study.grid import Run
from torchtune_longshort.study.run_configs import RunConfigs
from torchtune_longshort.study.stages import (StageError, error_line, log_tail, output_folder, run_command, steps_in,
                                              train_summary, tune_command)
from torchtune_longshort.training.equal_compute import trained_steps

RESULT = "result.json"
# What the BABILong generator sizes to a length label: the whole request (generator.FITS)
BABILONG_FIT = "prompt"
EVAL_SPEC = "eval_spec.json"  # what the results in a run's eval/ were computed from (checkpoint + spec)


class Study(RunConfigs):
    """One study: ``run()`` does everything; ``runs()`` lists the fine-tunes; results land in ``output_dir``. What each
    run trains from (its recipe config, the base checkpoint, the tokenizer) is :class:`RunConfigs`'.

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
        super().__init__(cfg, *output_folder(cfg.output_dir, output_dir, repo_root))
        self.executor, self.log = executor, log
        self.timeout = cfg.timeout_s
        self.jobs = cfg.jobs
        self.env = dict(os.environ)
        self.env.setdefault("HF_HUB_OFFLINE", "1")
        self.env.setdefault("HF_DATASETS_OFFLINE", "1")
        self.env.setdefault("TOKENIZERS_PARALLELISM", "false")

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

    def eval_tasks(self) -> List[str]:
        ev = self.cfg.eval
        tasks = [FAMILY_TASK[f] for f in FAMILY_TASK if ev.lengths_of(f)]
        if ev.babilong_lengths:
            tasks.append(TASK_FAMILIES["babilong"].task)
        if ev.longbench_e_data_dir and Path(ev.longbench_e_data_dir).is_dir():
            tasks.append(TASK_FAMILIES["longbench_e"].task)
        return tasks

    def spec_of(self, key: str, run: Optional[Run] = None) -> Dict[str, Any]:
        """What a run's result depends on; a result.json with another spec is stale and is redone. A base given as
        ``base.checkpoint_dir`` trains nothing: its checkpoint stands for its recipe config."""
        given = key == "base" and self.cfg.base.given
        trained = {"checkpoint_dir": str(self.base_checkpoint())} if given else self.recipe_config(key, run)
        return {"recipe_config": trained, "eval_tasks": self.eval_tasks(),
                "eval": {k: v for k, v in self.cfg.eval.as_dict().items() if k != "eval_base"}}

    def task_metadata(self, babilong_dir: Optional[Path] = None) -> Dict[str, Any]:
        """The lm-eval ``--metadata`` of every evaluation (``babilong_dir``: the generated BABILong data); the study's
        pre-flight check reads the same (:mod:`torchtune_longshort.study.preflight`)."""
        ev, extra = self.cfg.eval, {}
        if babilong_dir is not None:
            extra.update({TASK_FAMILIES["babilong"].data_dir_key: str(babilong_dir),
                          "max_seq_lengths": ",".join(ev.babilong.lengths)})
        if TASK_FAMILIES["longbench_e"].task in self.eval_tasks():
            extra[TASK_FAMILIES["longbench_e"].data_dir_key] = str(ev.longbench_e_data_dir)
        return ev.task_metadata(extra)

    # ------------------------------------------------------------------ stages
    def _train(self, key: str, run: Optional[Run]) -> Tuple[Path, bool]:
        """``(final checkpoint, whether it was trained by this call)``. Checkpoints of another recipe config (the
        ``recipe.yaml`` they were trained from differs) are trained again from step 0, never reused or resumed."""
        rdir = self.run_dir(key)
        rdir.mkdir(parents=True, exist_ok=True)
        recipe_yaml, rc_text = rdir / "recipe.yaml", OmegaConf.to_yaml(OmegaConf.create(self.recipe_config(key, run)))
        changed = recipe_yaml.is_file() and recipe_yaml.read_text() != rc_text
        recipe = self.recipe_fields(key, run)  # the steps the recipe will really train (equal compute: fewer)
        max_steps = trained_steps(recipe.max_steps, recipe.equal_compute_overhead, recipe.loss.alpha)
        train_dir = Path(recipe.output_dir)
        done = steps_in(train_dir)
        if changed and done:
            self.log(f"[study] {key}: {recipe_yaml} changed since its checkpoints were trained: training again from "
                     "step 0")
            done = []
        recipe_yaml.write_text(rc_text)
        if max_steps in done:
            self.log(f"[study] {key}: training done before (step_{max_steps} exists), skipped")
            return train_dir / f"step_{max_steps}", False
        extra = ["resume=True"] if [s for s in done if s > 0] else ["overwrite_output_dir=True"]
        if extra == ["resume=True"]:
            self.log(f"[study] {key}: resuming training from step_{max(done)}")
        # The recipe path stays relative to the repo root (cwd): tune run turns it into a module name, and an
        # absolute path becomes a relative module name that fails to import.
        argv = [tune_command(), "run", str(self.cfg.recipe), "--config", str(rdir / "recipe.yaml"), *extra]
        log_path = rdir / "train.log"
        rc = self.executor(argv, log_path, self.root, self.env, self.timeout)
        if rc != 0:
            tail = log_tail(log_path)
            raise StageError("train", f"recipe exited with {rc}: {error_line(tail)}", tail)
        final = train_dir / f"step_{max_steps}"
        if not final.is_dir():
            raise StageError("train", f"recipe exited 0 but wrote no {final}", log_tail(log_path))
        return final, True

    def _babilong_data(self) -> Optional[Path]:
        bab = self.cfg.eval.babilong
        if not bab or not bab.lengths:
            return None
        out = self.out / "babilong_data"
        marker = out / "DONE.json"
        # fit "prompt": a label is the token budget of the whole request (prompt, question, generation budget), so a
        # "32k" row runs on a model of max_length 32768 (the eval's max_length holds every label: the pre-flight)
        want = {"lengths": bab.lengths, "depths": bab.depths, "n": bab.n, "qa": bab.qa,
                "tokenizer": self.eval_tokenizer(), "fit": BABILONG_FIT}
        if marker.is_file() and json.loads(marker.read_text()) == want:
            return out
        argv = [sys.executable, "-m", "torchtune_longshort.eval.tasks.babilong.generator", "--out", str(out),
                "--tokenizer", self.eval_tokenizer(), "--lengths", ",".join(bab.lengths), "--n", str(bab.n),
                "--qa", bab.qa, "--haystack", bab.haystack_name, "--fit", BABILONG_FIT]
        if bab.depths:
            argv += ["--depths", ",".join(str(d) for d in bab.depths)]
        log_path = self.out / "babilong_data.log"
        rc = self.executor(argv, log_path, self.root, self.env, self.timeout)
        if rc != 0:
            tail = log_tail(log_path)
            raise StageError("babilong_data", f"generator exited with {rc}: {error_line(tail)}", tail)
        marker.write_text(json.dumps(want))
        return out

    def _eval(self, key: str, checkpoint: Path, spec: Dict[str, Any], trained_now: bool,
              extrapolate: bool = True) -> Dict[str, Any]:
        """lm-eval on ``checkpoint``. Results already in the run's ``eval/`` are reused only when ``eval_spec.json``
        says they come from this checkpoint, trained before this call, under this ``spec``; else ``eval/`` (which
        the study made) is replaced."""
        def read(eval_dir: Path, have: Dict[str, Any]) -> Dict[str, Any]:
            groups = load_group_subtasks(eval_dir)
            return {"results": have, "curves": load_curves(eval_dir), "coverage": group_coverage(have, groups),
                    "group_subtasks": groups, "not_scored": load_not_scored(eval_dir)}

        ev, rdir = self.cfg.eval, self.run_dir(key)
        eval_dir, tasks = rdir / "eval", self.eval_tasks()
        spec_file, want = rdir / EVAL_SPEC, {"checkpoint": str(checkpoint), **spec}
        if eval_dir.is_dir():
            same = (not trained_now and spec_file.is_file() and json.loads(spec_file.read_text()) == want)
            try:
                have = load_results(eval_dir) if same else {}
                if same and all(t in have for t in tasks):
                    self.log(f"[study] {key}: lm-eval results present, skipped")
                    return read(eval_dir, have)
            except FileNotFoundError:
                pass
            if not same:
                self.log(f"[study] {key}: the results in {eval_dir} are of another checkpoint or eval spec: "
                         "evaluating again")
                spec_file.unlink(missing_ok=True)
                shutil.rmtree(eval_dir)
        argv = ev.command(self.eval_model_args(checkpoint, extrapolate), tasks, eval_dir,
                          self.task_metadata(self._babilong_data()), self.root)
        log_path = rdir / "eval.log"
        rc = self.executor(argv, log_path, self.root, self.env, self.timeout)
        if rc != 0:
            tail = log_tail(log_path)
            raise StageError("eval", f"lm-eval exited with {rc}: {error_line(tail)}", tail)
        try:
            have = load_results(eval_dir)
        except FileNotFoundError as e:
            raise StageError("eval", str(e), log_tail(log_path)) from e
        missing = [t for t in tasks if t not in have]
        if missing:
            raise StageError("eval", f"lm-eval results lack tasks {missing}", log_tail(log_path))
        spec_file.write_text(json.dumps(want, indent=1, default=str))
        return read(eval_dir, have)

    # ------------------------------------------------------------------ one run
    def run_one(self, key: str, run: Optional[Run] = None, evaluate: bool = True,
                blocked: Optional[str] = None) -> Dict[str, Any]:
        """Train (or skip / resume) and evaluate one run; always writes and returns its result.json record."""
        rdir = self.run_dir(key)
        spec = self.spec_of(key, run)
        res_path = rdir / RESULT
        if res_path.is_file():
            old = json.loads(res_path.read_text())
            if old.get("status") == "ok" and old.get("spec") == spec:
                self.log(f"[study] {key}: result.json present (ok), skipped")
                return old
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
                self.log(f"[study] {key}: training")
                ckpt, trained_now = self._train(key, run)
                rec["train"] = train_summary(ckpt.parent)
            rec["checkpoint"] = str(ckpt)
            rec["wall_s_train"] = round(time.time() - t0, 1)
            if evaluate:
                stage, t1 = "eval", time.time()
                self.log(f"[study] {key}: evaluating {len(self.eval_tasks())} tasks")
                rec.update(self._eval(key, ckpt, spec, trained_now))
                rec["wall_s_eval"] = round(time.time() - t1, 1)
            rec["status"] = "ok"
        except Exception as e:  # recorded, and the grid goes on
            rec["status"], rec["stage"] = "failed", getattr(e, "stage", stage)
            rec["error"] = str(e)
            rec["log_tail"] = getattr(e, "log_tail", "") or traceback.format_exc(limit=5)
            self.log(f"[study] {key}: FAILED at {rec['stage']}: {e}")
        rec["wall_s"] = round(time.time() - t0, 1)
        rec["provenance"] = self.provenance()
        rdir.mkdir(parents=True, exist_ok=True)
        tmp = res_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=1, default=str))
        tmp.replace(res_path)
        return rec

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
        self.out.mkdir(parents=True, exist_ok=True)
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

            def one(i: int, run: Run) -> Dict[str, Any]:
                self.log(f"[study] ({i}/{len(runs)}) {run.key}  [{time.time() - t0:.0f} s elapsed]")
                rec = self.run_one(run.key, run, blocked=blocked)
                with lock:
                    bar.set_postfix_str(run.key, refresh=False)
                    bar.update(1)
                return rec

            try:
                with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                    futures = [pool.submit(one, i, run) for i, run in enumerate(runs, 1)]
                    for run, fut in zip(runs, futures):
                        records[run.key] = fut.result()  # run_one records its own failures; grid order kept
            finally:
                self.env = env
        finally:
            bar.close()
            self.log = log
        summary = {"name": self.cfg.name, "quick": self.cfg.quick, "config": self.cfg.to_dict(),
                   "wall_s_this_invocation": round(time.time() - t0, 1), "provenance": self.provenance(),
                   "runs": {k: {"status": r["status"], "wall_s": r.get("wall_s"), "error": r.get("error")}
                            for k, r in records.items()}}
        (self.out / "study.json").write_text(json.dumps(summary, indent=1, default=str))
        return records
