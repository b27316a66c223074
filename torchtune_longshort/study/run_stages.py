"""The subprocess stages of a study's runs, each through the project's own entry point as a user would type it:
training (``tune run`` on the recipe, resumed or skipped by the steps already in the run's folder), the BABILong data
(generated once per study) and lm-eval on a checkpoint (its results reused only when ``eval_spec.json`` says they
are of this checkpoint and spec). :class:`~torchtune_longshort.study.runner.Study` runs them for every run and
records the outcome; a failure is a :class:`~torchtune_longshort.study.stages.StageError` with its log's tail.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from omegaconf import OmegaConf

from torchtune_longshort.eval.report.group_coverage import group_coverage, load_group_subtasks
from torchtune_longshort.eval.report.results_io import (load_curves, load_not_scored, load_results, load_stderrs,
                                                        remove_lm_eval_files)
from torchtune_longshort.eval.tasks import TASK_FAMILIES
from torchtune_longshort.eval.tasks.babilong.generator import WRITTEN as BABILONG_WRITTEN
from torchtune_longshort.eval.tasks.babilong.official_prompts import PROMPT_KEY, PROMPT_STYLES, check_prompt_style
from torchtune_longshort.plural import counted
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.eval_config import FAMILY_TASK
from torchtune_longshort.study.grid import Run
from torchtune_longshort.study.portable import places, same_where_it_was
from torchtune_longshort.study.run_configs import (
    BABILONG_ATTEMPT_LOG, BABILONG_DIR, BABILONG_LOG, BABILONG_LOG_ATTEMPTS, EVAL_LOG, TRAIN_LOG, RunConfigs,
)
from torchtune_longshort.output_guard import atomic_write_json, atomic_write_text, read_json, write_names
from torchtune_longshort.study.stages import (
    PROGRAMS, StageError, error_line, exit_words, fold_left_attempt, keep_attempt, log_tail, run_eval, run_stage,
    steps_in, tune_command,
)
from torchtune_longshort.training.checkpointing import read_recipe_state, recipe_state_path
from torchtune_longshort.training.equal_compute import trained_steps
from torchtune_longshort.training.overwrite_rules import overwrite_refusal
from torchtune_longshort.training.recipe_config.inputs import input_paths, written_names

# What the BABILong generator sizes to a length label: the whole request (generator.FITS)
BABILONG_FIT = "prompt"
EVAL_SPEC = "eval_spec.json"  # what the results in a run's eval/ were computed from (checkpoint + spec)
RETRAIN = ".retrain_from_step_0"  # in a run's folder while it trains again from step 0 (its recipe.yaml changed)


def babilong_group(results: Dict[str, Dict[str, Any]], groups: Dict[str, List[str]], tasks: List[str],
                   stderrs: Optional[Dict[str, Dict[str, float]]] = None) -> Tuple[Dict[str, Dict[str, Any]],
                                                                               Dict[str, List[str]]]:
    """``(results, group_subtasks)`` with the pack's BABILong group added when ``tasks`` ran some of its QA tasks
    one by one (``BabilongConfig.tasks``), as lm-eval aggregates the group (its ``weight_by_size: false``): each
    metric the unweighted mean over the tasks that report it (``lm_eval.api.metrics.aggregate_subtask_metrics``)
    and, in ``stderrs`` (``{task: {metric: se}}``, lm-eval's ``_stderr`` entries), its standard error when every one
    of those tasks has one: ``sqrt(sum se_i^2) / k`` (``unweighted_mean_stderr``, the error of a mean of k
    independent means; the size-weighted ``pooled_sample_stderr`` goes with a size-weighted mean). So a run's record
    holds the group's numbers, errors and coverage whichever tasks ran. Unchanged when the group itself ran or no
    BABILong task did."""
    group = TASK_FAMILIES["babilong"].task
    members = [t for t in tasks if t.startswith(group + "_") and t in results]
    if not members or group in results:
        return results, groups
    scores: Dict[str, Any] = {}
    errors: Dict[str, float] = {}
    for metric in dict.fromkeys(m for t in members for m in results[t]):
        have = [t for t in members if isinstance(results[t].get(metric), (int, float))
                and not isinstance(results[t].get(metric), bool)]
        if have:
            scores[metric] = sum(results[t][metric] for t in have) / len(have)
            ses = [(stderrs or {}).get(t, {}).get(metric) for t in have]
            if all(se is not None for se in ses):
                errors[metric] = math.sqrt(sum(se * se for se in ses)) / len(ses)
    if stderrs is not None and errors:
        stderrs[group] = errors
    return {**results, group: scores}, {**groups, group: members}


class RunStages(RunConfigs):
    """The stages of a study's runs (see the module docstring), on top of what each run trains from
    (:class:`RunConfigs`).

    Args:
        cfg, root, out: as :class:`RunConfigs`.
        executor: ``(argv, log_path, cwd, env, timeout) -> exit code`` (``stages.run_command`` runs a subprocess).
        log: progress printer.
    """

    def __init__(self, cfg: StudyConfig, root: Path, out: Path, executor: Callable[..., int],
                 log: Callable[[str], None]):
        super().__init__(cfg, root, out)
        self.executor, self.log = executor, log
        self.timeout = cfg.timeout_s
        self.env = dict(os.environ)
        self.env.setdefault("HF_HUB_OFFLINE", "1")
        self.env.setdefault("HF_DATASETS_OFFLINE", "1")
        self.env.setdefault("TOKENIZERS_PARALLELISM", "false")
        # one BABILong generation at a time: with jobs > 1 the runs' evaluations retry a failed one together, into
        # the same data folder and attempt log (a later one finds the data an earlier one wrote)
        self.babilong_lock = threading.Lock()

    def eval_tasks(self) -> List[str]:
        ev = self.cfg.eval
        tasks = [FAMILY_TASK[f] for f in FAMILY_TASK if ev.lengths_of(f)]
        if ev.babilong_lengths:
            tasks += ev.babilong.tasks
        if ev.longbench_e_data_dir and Path(ev.longbench_e_data_dir).expanduser().is_dir():
            tasks.append(TASK_FAMILIES["longbench_e"].task)
        return tasks

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
    def _train(self, key: str, run: Optional[Run], config: Optional[Dict[str, Any]] = None) -> Tuple[Path, bool]:
        """``(final checkpoint, whether it was trained by this call)``. Checkpoints of another recipe config (the
        ``recipe.yaml`` they were trained from differs) are trained again from step 0, never reused or resumed.
        ``config``: the run's :meth:`recipe_config` where the caller has it already."""
        rdir = self.run_dir(key)
        rdir.mkdir(parents=True, exist_ok=True)
        config = self.recipe_config(key, run) if config is None else config
        recipe_yaml, rc_text = rdir / "recipe.yaml", OmegaConf.to_yaml(OmegaConf.create(config))
        changed = recipe_yaml.is_file() and not self._same_recipe(key, recipe_yaml.read_text(), rc_text)
        recipe = self.recipe_fields(key, run, config)  # the steps the recipe will really train (equal compute: fewer)
        max_steps = trained_steps(recipe.max_steps, recipe.equal_compute_overhead, recipe.loss.alpha)
        train_dir = Path(recipe.output_dir)
        done = steps_in(train_dir)
        # A retrain from step 0 is marked until it ends: a study killed before the recipe deleted the old step
        # folders (while it imports) would otherwise find the new recipe.yaml beside the old checkpoints and take them
        retrain = rdir / RETRAIN
        done_before = bool(done)
        if changed and done:
            self.log(f"[study] {key}: {recipe_yaml} changed since its checkpoints were trained: training again from "
                     "step 0")
            atomic_write_text(retrain, "the checkpoints here are of an earlier recipe.yaml\n")
        if retrain.is_file():
            done = self._retrained(key, train_dir, done, rc_text)
        atomic_write_text(recipe_yaml, rc_text)  # whole or not at all: one cut off would read as a changed config
        if max_steps in done:
            self.log(f"[study] {key}: training done before (step_{max_steps} exists), skipped")
            retrain.unlink(missing_ok=True)  # a retrain that ended, its marker left by a study killed then
            return train_dir / f"step_{max_steps}", False
        extra = ["resume=True"] if [s for s in done if s > 0] else ["overwrite_output_dir=True"]
        kept = extra[0].startswith("overwrite") and overwrite_refusal(train_dir, input_paths(recipe),
                                                                      written_names(recipe))
        if kept:  # the recipe would refuse the overwrite, advising an output_dir the study chooses, not its user
            raise StageError("train", f"{train_dir} cannot be trained into ({kept}): move what you keep out of it, "
                                      "then run the study again")
        if extra == ["resume=True"]:
            self.log(f"[study] {key}: resuming training from step_{max(done)}")
        elif not (changed and done_before):  # said once: 'training again from step 0' said it above
            self.log(f"[study] {key}: training")
        # The recipe path stays relative to the repo root (cwd): tune run turns it into a module name, and an
        # absolute path becomes a relative module name that fails to import.
        argv = [tune_command(), "run", str(self.cfg.recipe), "--config", str(rdir / "recipe.yaml"), *extra]
        log_path = rdir / TRAIN_LOG
        rc = run_stage(self.executor, "train", argv, log_path, self.root, self.env, self.timeout)
        if rc != 0:
            tail = log_tail(log_path)
            raise StageError("train", f"{exit_words('train', rc)}: {error_line(tail)}", tail)
        final = train_dir / f"step_{max_steps}"
        if not final.is_dir():
            raise StageError("train", f"{PROGRAMS['train']} exited 0 but wrote no {final}", log_tail(log_path))
        retrain.unlink(missing_ok=True)
        return final, True

    def _same_recipe(self, key: str, old_text: str, rc_text: str) -> bool:
        """Whether the run's earlier ``recipe.yaml`` (``old_text``) is the one it would write now (``rc_text``), its
        paths inside the study's folder compared by place, as ``result.json``'s spec is: that folder where the earlier
        one was written is read from its ``output_dir`` (``<study>/runs/<key>/train``). Before, a study copied or moved
        elsewhere trained every run again from step 0 once anything changed its spec (an eval-only ``ppl_lengths``)."""
        if old_text == rc_text:
            return True
        try:
            old = OmegaConf.to_container(OmegaConf.create(old_text), resolve=False)
        except Exception:  # a recipe.yaml that does not read (a user's edit): another config
            return False
        return self._same_moved(key, old, OmegaConf.to_container(OmegaConf.create(rc_text), resolve=False))

    def _same_moved(self, key: str, old: Any, new: Any) -> bool:
        """Whether the run's config ``old``, written with absolute paths where the study's folder was then (read from
        its ``output_dir``, ``<study>/runs/<key>/train``), is ``new``, its paths inside the study's folder compared
        by place and those outside it as they are."""
        rel = (self.run_dir(key) / "train").relative_to(self.out).parts
        was = Path(str(old.get("output_dir", ""))) if isinstance(old, dict) else Path()
        if not was.is_absolute() or was.parts[-len(rel):] != rel:
            return False
        return same_where_it_was(old, new, places(self.out, self.root), str(Path(*was.parts[:-len(rel)])))

    def _retrained(self, key: str, train_dir: Path, done: List[int], rc_text: str) -> List[int]:
        """The steps in ``done`` that a retrain from step 0 (its marker there) saved before it was stopped: all of
        them when the newest one's recipe state records this ``recipe.yaml`` (``rc_text``) as its config, the recipe
        having cleared the old checkpoints before it trained; none otherwise (the old checkpoints, or no state to
        tell). Before, the rerun trained again from step 0 whatever the stopped retrain had saved."""
        states = [k for k in done if k > 0 and recipe_state_path(train_dir / f"step_{k}").is_file()]
        if not states:
            return []
        try:
            saved = read_recipe_state(train_dir / f"step_{states[-1]}", mmap=True).get("config")
        except Exception:  # a state that does not load: not taken as the retrain's
            return []
        new = OmegaConf.to_container(OmegaConf.create(rc_text), resolve=True)

        def run_config(c: Any) -> Any:  # the command line's overwrite / resume are no setting of the run
            return {k: v for k, v in c.items() if k not in ("overwrite_output_dir", "resume")} if isinstance(
                c, dict) else c

        # a study moved since the retrain saved: its saved config names the old folder (before: retrained from 0)
        if run_config(saved) != run_config(new) and not self._same_moved(key, run_config(saved), run_config(new)):
            return []
        self.log(f"[study] {key}: its retrain from step 0 was stopped after it saved step_{states[-1]} (of this "
                 "recipe.yaml)")
        return done

    def _babilong_data(self) -> Optional[Path]:
        with self.babilong_lock:
            return self._babilong_generated()

    def _babilong_generated(self) -> Optional[Path]:
        bab = self.cfg.eval.babilong
        if not bab or not bab.lengths:
            return None
        out = self.out / BABILONG_DIR
        marker = out / "DONE.json"
        # fit "prompt": a label is the token budget of the whole request (prompt, question, generation budget), so a
        # "32k" row runs on a model of max_length 32768 (the eval's max_length holds every label: the pre-flight)
        want = {"lengths": bab.lengths, "depths": bab.depths, "n": bab.n, "qa": bab.qa,
                "tokenizer": self.eval_tokenizer(), "fit": BABILONG_FIT}
        # sized for the prompt the tasks send (eval.metadata.babilong_prompt: BABILong's own is longer); the marker
        # names it only when it is not the default, so data of earlier studies stays theirs
        style = check_prompt_style(self.cfg.eval.metadata_value(PROMPT_KEY))
        if style != PROMPT_STYLES[0]:
            want["prompt"] = style
        files = [out / length / f"{qa.strip()}.jsonl" for length in bab.lengths for qa in bab.qa.split(",")]
        # a marker cut off (a full disk, a kill) counts as none, and so does one whose files are not all there (one
        # deleted or moved since): generated again, instead of every later evaluation scoring the task NaN
        if read_json(marker) == want and all(f.is_file() for f in files):
            return out
        if marker.is_file() and not (out / BABILONG_WRITTEN).is_file():
            # data an earlier version of the study generated (its marker proves it) before the generator listed
            # its files: listed now, so the generator replaces them instead of refusing them as a user's
            write_names(out / BABILONG_WRITTEN, (p.relative_to(out).as_posix() for p in out.glob("*/qa*.jsonl")))
        argv = [sys.executable, "-m", "torchtune_longshort.eval.tasks.babilong.generator", "--out", str(out),
                "--tokenizer", self.eval_tokenizer(), "--lengths", ",".join(bab.lengths), "--n", str(bab.n),
                "--qa", bab.qa, "--haystack", bab.haystack_name, "--fit", BABILONG_FIT,
                "--trust-remote-code"]  # the eval tokenizer, as the study's evaluations read it (trust_remote_code)
        if bab.depths:
            argv += ["--depths", ",".join(str(d) for d in bab.depths)]
        if want.get("prompt"):
            argv += ["--prompt", want["prompt"]]
        # each attempt written apart, then appended to the study's log: a later run's generation no longer
        # overwrites the output of the one a failure line names; one a killed study left is kept first
        attempt, log = self.out / BABILONG_ATTEMPT_LOG, self.out / BABILONG_LOG
        fold_left_attempt(attempt, log, BABILONG_LOG_ATTEMPTS)
        started = time.time()
        try:
            rc = run_stage(self.executor, "babilong_data", argv, attempt, self.root, self.env, self.timeout)
            tail = log_tail(attempt)
        finally:
            keep_attempt(attempt, log, started, BABILONG_LOG_ATTEMPTS)
        if rc != 0:
            raise StageError("babilong_data", f"{exit_words('babilong_data', rc)}: {error_line(tail)}", tail)
        atomic_write_json(marker, want)
        return out

    def _eval(self, key: str, checkpoint: Path, spec: Dict[str, Any], trained_now: bool,
              extrapolate: bool = True) -> Dict[str, Any]:
        """lm-eval on ``checkpoint``. Results already in the run's ``eval/`` are reused only when ``eval_spec.json``
        says they come from this checkpoint, trained before this call, under this ``spec``; else lm-eval's files in
        ``eval/`` are deleted (a file lm-eval did not write stays, and is named in the log) and lm-eval runs again."""
        def read(eval_dir: Path, have: Dict[str, Any]) -> Dict[str, Any]:
            stderrs = load_stderrs(eval_dir)
            have, groups = babilong_group(have, load_group_subtasks(eval_dir), tasks, stderrs)
            return {"results": have, "stderr": stderrs, "curves": load_curves(eval_dir),
                    "coverage": group_coverage(have, groups), "group_subtasks": groups,
                    "not_scored": load_not_scored(eval_dir)}

        ev, rdir = self.cfg.eval, self.run_dir(key)
        eval_dir, tasks = rdir / "eval", self.eval_tasks()
        spec_file, want = rdir / EVAL_SPEC, {"checkpoint": str(checkpoint), **spec}
        if eval_dir.is_dir():
            # read_json: None for an eval_spec.json cut off (a full disk, a kill): the results are redone
            same = not trained_now and read_json(spec_file) == want
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
                kept = remove_lm_eval_files(eval_dir)
                if kept:
                    self.log(f"[study] {key}: kept {counted(len(kept), 'file')} in {eval_dir} that lm-eval did not "
                             f"write: {', '.join(str(p.relative_to(eval_dir)) for p in kept)}")
        argv = ev.command(self.eval_model_args(checkpoint, extrapolate), tasks, eval_dir,
                          self.task_metadata(self._babilong_data()), self.root)
        have = run_eval(self.executor, argv, rdir / EVAL_LOG, self.root, self.env, self.timeout, eval_dir, tasks)
        atomic_write_json(spec_file, want, indent=1, default=str)
        return read(eval_dir, have)
