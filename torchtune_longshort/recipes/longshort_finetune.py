"""Long-short alignment fine-tuning (Du et al., ICML 2025) as a torchtune recipe.

    longshort-cp tiny/longshort_stdlib.yaml run.yaml   # copies a shipped config (--list names them)
    tune run [--nproc_per_node 2] torchtune_longshort/recipes/longshort_finetune.py --config run.yaml [key=value ...]

``tune run`` imports the path as module ``torchtune_longshort.recipes.longshort_finetune``: it runs from any folder
once installed (``longshort-cp`` copies the shipped configs). One file serves one process and ``torchrun`` (FSDP2
through torchtune's ``training.shard_model``; gloo on CPU, nccl on GPU).

Per optimizer step: ``gradient_accumulation_steps`` micro-batches, each a dual-window batch
(``torchtune_longshort.data.DualWindowBatcher``: one shift ``e`` per micro-batch, window A = first L tokens,
window B = last L tokens of an L+e sample) scored by ``LongShortLoss``: ``(ce_A + ce_B)/2 + alpha * SCE``.
``alpha = 0`` is cross-entropy on exactly the same tokens. ``batch_size`` is global (the paper's 64): each rank's
micro-batch is ``batch_size / (world_size * gradient_accumulation_steps)``.

Checkpoints: ``output_dir/step_<k>``, each a checkpoint folder of ``torchtune_longshort.models.hf_checkpoint`` (LoRA:
merged, + a PEFT ``adapter/``), and beside them ``recipe_state/step_<k>.pt`` (optimizer, LR schedule, data position,
RNGs), written aside and renamed into place; ``resume=True`` reproduces the uninterrupted run's losses.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Any, Dict

from torchtune_longshort.refusals import stopped_while_importing

PROG = "longshort_finetune"  # the name its lines go by, under `tune run` and in each torchrun worker

with stopped_while_importing(__name__, PROG):  # Ctrl-C while it imports (seconds): one line, exit 130
    import torch
    from omegaconf import DictConfig
    from torchtune import config, utils

    from torchtune_longshort._quiet import quiet_upstream
    from torchtune_longshort.data.text_files import DataRecordError
    from torchtune_longshort.devices import out_of_memory_in, release_cached
    from torchtune_longshort.disk_space import is_out_of_space, written_file
    from torchtune_longshort.models.peft_adapter import base_config_note
    from torchtune_longshort.refusals import refusing, stoppable, stopped
    from torchtune_longshort.rope import rope_modules
    from torchtune_longshort.training import out_of_space
    from torchtune_longshort.training.bad_record import record_stop
    from torchtune_longshort.training.checkpointing import saves_at
    from torchtune_longshort.training.data_setup import StepStart, positions_on, window_positions
    from torchtune_longshort.training.learned_rope import average_replicated_grads
    from torchtune_longshort.training.lost_process import lost_processes
    from torchtune_longshort.training.metrics import mean_over_ranks, where_logged
    from torchtune_longshort.training.out_of_memory import OutOfMemory, describe, stop_message
    from torchtune_longshort.training.out_of_space import OutOfSpace
    from torchtune_longshort.training.recipe_config.validate import check_config_argument, tune_run_import_path
    from torchtune_longshort.training.recipe_saving import RecipeSaving, latest_checkpoint_said, run_latest
    from torchtune_longshort.training.recipe_setup import RecipeSetup
    from torchtune_longshort.training.step_checks import (TERMS, after_non_finite, check_finite_losses,
                                                          check_finite_norms, clip_gradient_norms, loss_terms,
                                                          read_step)
    from torchtune_longshort.training.stop_signals import StopSignals, at_once, stopped_line
    from torchtune_longshort.training.validation import validation_metrics
    from torchtune_longshort.windows import unstack_window_outputs

log = utils.get_logger("INFO")


class LongShortFinetuneRecipe(RecipeSaving, RecipeSetup):
    """Full / LoRA / QLoRA fine-tuning with ``ce + alpha * misalignment`` on dual-window batches.

    The config's fields, with their defaults and checks, are :class:`~torchtune_longshort.training.recipe_config.
    RecipeConfig` and its sections (the README's table is generated from them); the shipped tiny/longshort_stdlib.yaml
    (``longshort-cp`` copies it) is a complete, commented example. The constructor builds and checks it before any side
    effect; :meth:`setup` builds the run's parts (:class:`RecipeSetup`), :meth:`train` runs the loop, and
    :meth:`save_checkpoint` writes a step (:class:`RecipeSaving`).
    """

    def __init__(self, cfg: DictConfig) -> None:
        super().__init__(cfg)  # the config read and checked, then the process: group, device, dtype, seed
        self._saved_step = None  # the step of the last checkpoint this process wrote
        self._ropes = None  # the model's RoPE modules, told each drawn input_pos's range (a position sampler's)
        self._in_optimizer_step = False  # an error there may leave the weights part-updated: nothing is saved then
        self._stop_step = None  # the step a stop signal received now finishes and saves (None: the next one)
        self._saving = False  # a periodic save is being written (a stop signal then ends the run after it)
        self.stop_signals = StopSignals(  # the first rank says which step a stop saves
            (lambda: self._stop_step or self.global_step + 1) if self._is_rank_zero else None,
            saving=lambda: self._saving)
        self.stopped_by = 0
        # (step, staged folder) -> None, called once a checkpoint is fully written, before it is renamed into place
        self.before_commit = None

    # ------------------------------------------------------------------ train
    def train(self) -> None:
        """:meth:`_train_loop`; a write of the run's logs that finds the disk full ends it in one line, as a save does
        (:mod:`~torchtune_longshort.training.out_of_space`). Whatever ends it early (an error, Ctrl-C in a notebook),
        the output folder's lock is given back and the progress bar closed, so that the same process can resume.
        A resumed run already at its last step (:attr:`finished`) says so and trains nothing."""
        if self.finished:
            utils.log_rank_zero(log, self.nothing_to_train())
            return
        try:
            self._train()
        except BaseException:
            if getattr(self, "_run_log", None) is not None:
                with contextlib.suppress(Exception):
                    self._run_log.close()
            self.release_output_dir()
            raise

    def _train(self) -> None:
        try:
            self._train_loop()
        except Exception as e:
            if not (isinstance(e, OutOfSpace) or is_out_of_space(e)):
                raise
            self._run_log.close()  # the progress bar's line ends before the run's last line
            with contextlib.suppress(OSError):  # closed now, so that no flush at exit fails again ("ignored")
                self._run_log.close_loggers()
            if isinstance(e, OutOfSpace):
                raise
            raise OutOfSpace(out_of_space.stop_message(
                written_file(e) or "the run's logs", self.global_step, self.ckpts, self._checkpoint_bytes,
                self._saved_step is not None, e, self.max_steps,
            )) from None

    def _train_loop(self) -> None:
        cfg, max_steps = self.config, self.max_steps
        val_every = (cfg.validation.every_n_steps if cfg.validation else None) or max_steps
        self._model.train()
        if self._device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self._device)
        self._run_log.start(max_steps, self.global_step, self._batcher.stream.records_skipped)
        stop_at = self.stop_at
        self._profiler.start()
        while self.global_step < stop_at:
            lr = self._optimizer.param_groups[0]["lr"]  # the step's own (the scheduler moves it on inside the step)
            sums, norms = self._checked_step()
            self._profiler.step()
            self._run_log.note_skipped(self.global_step, self._batcher.stream)
            stop_signal = self._over_ranks(sums)
            validates = self._val_tokens is not None and (self.global_step % val_every == 0
                                                          or self.global_step == max_steps)
            if self._distributed and not validates:  # read for this step: a signal from here on, after the next
                self._stop_step = self.global_step + 1
            if self.global_step % cfg.log_every_n_steps == 0 or self.global_step == max_steps:
                self._run_log.log_step(self.global_step, sums, lr, norms, self._device, self.world_size)
            self._run_log.advance()
            if validates:
                with self._run_log.paused():  # throughput counts training time only
                    self._validate()
            if validates or not self._distributed:  # a signal received while validating (one process: a flag)
                stop_signal = stop_signal or self.stop_signals.received(self._distributed, self._device)
            self._stop_step = self.global_step + 1  # as above
            if saves_at(self.global_step, stop_at, max_steps, cfg.save_every_n_steps) or stop_signal:
                self._stop_step = self.global_step  # a signal during the save: this step, saved now, is the last
                self._saving = True
                try:
                    with self._run_log.paused():
                        self.save_checkpoint()
                finally:
                    self._saving = False
                if not stop_signal and self.global_step < stop_at:  # it trained the next step and saved again
                    stop_signal = self.stop_signals.received(self._distributed, self._device)
                self._stop_step = self.global_step + 1
            if stop_signal:
                self.stopped_by = stop_signal
                utils.log_rank_zero(log, stopped_line(stop_signal, self.global_step, max_steps,
                                                      str(self.ckpts.path(self.global_step))))
                break
        else:
            if stop_at < max_steps:  # the loop ran to stop_at (every other way out breaks or raises)
                utils.log_rank_zero(log, self.stopped_early())
        self._profiler.stop()
        self._run_log.close()

    def _checked_step(self):
        """:meth:`_train_step`; a data record that cannot be read ends the run at the last good step, saved as on a
        signal (the record is named; the data position saved is the step's start, so resume reads it again); so does
        an out-of-memory error (:mod:`~torchtune_longshort.training.out_of_memory`)."""
        start = StepStart(self._batcher, self.generators)
        try:
            sums_norms, error = out_of_memory_in(self._train_step)
            if error is None:
                return sums_norms
        except DataRecordError as e:
            start.restore(self._batcher, self.generators)
            self._run_log.close()
            if self.global_step > 0 and self._saved_step != self.global_step:
                self.save_checkpoint()
            raise record_stop(e, self.ckpts.path(self.global_step) if self.global_step else None,
                              self.output_dir, self.ckpts.restart()) from None
        # out of memory (the failed step's tensors are freed by now)
        account = describe(error, self.global_step + 1, self.config, self._device, self._loss_fn.num_chunks,
                           self.world_size)
        self._optimizer.zero_grad(set_to_none=True)
        release_cached(self._device)
        start.restore(self._batcher, self.generators)
        self._run_log.close()
        raise OutOfMemory(stop_message(*account, self.global_step, self._save_after_out_of_memory(),
                                       self.ckpts.restart()))

    def _validate(self) -> None:
        """Log ``val_ce`` / ``val_ppl``. Out of memory there (``validation.seq_len`` may be longer than the training
        windows): said once, and no validation for the rest of this process; the step it follows is done and kept.
        Under torchrun it ends the run (the ranks would no longer meet in the same collectives)."""
        val, error = out_of_memory_in(
            lambda: validation_metrics(self._model, self._val_tokens, self._device, self.model_vocab))
        if error is None:
            self._run_log.log_validation(self.global_step, val)
            return
        error = error[:300]
        self._model.train()
        release_cached(self._device)
        said = (f"validation after step {self.global_step} ran out of memory on {self._device} at validation.seq_len "
                f"{self.config.validation.seq_len} ({error})")
        if self._distributed:
            self._run_log.close()
            raise OutOfMemory(f"{said}; a shorter validation.seq_len fits (continue with resume=True)")
        self._val_tokens = None
        self._run_log.note(self.global_step, f"{said}: no validation for the rest of this run; a shorter "
                                             "validation.seq_len fits")

    def _train_step(self):
        """One optimizer step over ``gradient_accumulation_steps`` micro-batches: ``(logged sums, grad norms)``, the
        sums averaged over this rank's micro-batches (:meth:`_over_ranks` averages them over the ranks). The device
        is read once, after clipping and before the optimizer step
        (:func:`~torchtune_longshort.training.step_checks.read_step`): the logged values and the finiteness checks
        take their numbers from that read, not a read per micro-batch and per check."""
        self._optimizer.zero_grad(set_to_none=True)
        accum = self.config.gradient_accumulation_steps
        terms, places, e_sum = [], [], 0.0
        for _ in range(accum):
            batch = self._batcher.next_batch()
            out = self._loss_step(batch)
            (out.loss / accum).backward()
            terms.append(loss_terms(out))
            places.append({"e": batch["e"], "data_position": batch["data_position"]})
            e_sum += batch["e"] / accum
            self._run_log.tokens += 2 * batch["tokens_a"].numel() * self.world_size  # both windows go through the model
        if self._distributed:
            average_replicated_grads(self._model)  # a learned RoPE's (CLEX): FSDP2 reduced the rest
        norms = clip_gradient_norms(self._model, self.config.clip_grad_norm,
                                    rope_separately=self.config.clip_rope_separately)
        rows, norms = read_step(terms, norms)
        check_finite_losses(rows, lambda i: self._where(places[i]), after_non_finite(self.ckpts))
        sums = {"loss": 0.0, "ce": 0.0, "misalignment": 0.0, "e": e_sum}
        for row in rows:  # the same float64 sums, term by term, as reading each micro-batch's values did
            for key, value in zip(TERMS, row):
                sums[key] += value / accum
        check_finite_norms(norms, lambda: f"{self._where(places[-1])}, loss {sums['loss']:.6g}",
                           after_non_finite(self.ckpts))
        self._in_optimizer_step = True
        self._optimizer.step()
        self._in_optimizer_step = False
        if self._lr_scheduler is not None:
            self._lr_scheduler.step()
        self.global_step += 1
        return sums, norms

    def _over_ranks(self, sums: Dict[str, float]) -> int:
        """Under torchrun: the logged loss terms (``sums``, this rank's) become the global batch's mean, and the stop
        signal any rank received is returned (every rank stops at the same step): one all-reduce and one device
        read for both (the gradient norms are global already: clipping reduced them). One process: 0."""
        if not self._distributed:
            return 0
        counts = mean_over_ranks(sums, TERMS, self._device, self.world_size, extra=self.stop_signals.flags())
        return StopSignals.first_of(counts)

    def _where(self, batch: Dict[str, Any]) -> str:
        return f"step {self.global_step + 1} (rank {self.rank}), e={batch['e']}, data position {batch['data_position']}"

    def _loss_step(self, batch: Dict[str, Any]):
        """Forward both windows of a dual-window batch and score them: ``LongShortLoss``'s output."""
        ta, tb = batch["tokens_a"].to(self._device), batch["tokens_b"].to(self._device)
        la, lb = batch["labels_a"].to(self._device), batch["labels_b"].to(self._device)
        # one forward over both windows stacked on the batch dimension (as many tokens as two calls, one kernel
        # launch per layer instead of two)
        tokens = torch.cat([ta, tb])
        input_pos = None
        if self._pos_sampler is not None:
            if self._ropes is None:
                self._ropes = rope_modules(self._model)
            input_pos = positions_on(self._device, window_positions(
                self._pos_sampler, self._pos_generator, ta.shape[0], self.config.seq_len, self.rank, self.world_size,
            ), self._ropes)
        out_a, out_b = unstack_window_outputs(self._forward(tokens, input_pos=input_pos), ta.shape[0])
        return self._loss_fn(out_a, out_b, la, lb, batch["e"])

    def cleanup(self) -> None:
        self.release_output_dir()
        if self._is_rank_zero:
            if not self.finished:  # a finished run's resume started no logger
                self._run_log.close_loggers()
            latest = latest_checkpoint_said(self.ckpts, self.max_steps)  # a user's step past max_steps: not named
            print(f"[longshort] checkpoint: {latest}{base_config_note(run_latest(self.ckpts, self.max_steps))}")
            print(where_logged(self.output_dir, self.config.metric_logger.log_dir))
        if self._distributed:
            # every rank leaves together: a rank that tears its gloo pairs down while its peer is still flushing
            # (rank 0 writes the logs above) can abort the peer at exit ("terminate called ...", seen once in CI)
            self._barrier()
            torch.distributed.destroy_process_group()


def recipe_main() -> None:
    """``tune run``'s entry point, and ``python`` / ``torchrun`` on this file's (the current folder importable too)."""
    with tune_run_import_path():
        sys.argv[1:] = refusing(PROG, lambda: check_config_argument(sys.argv[1:]))
        _run()


SETUP_STOPPED = ("stopped while setting up, before the first step: nothing was trained; what the setup made (a new "
                 "output folder, a tokenizer it trained) was taken back, and a run it resumes is untouched; run again")
SETUP_LOST = "before the first step: nothing was trained; run the command again"


def _set_up(cfg: DictConfig) -> "LongShortFinetuneRecipe":
    recipe = refusing(PROG, lambda: LongShortFinetuneRecipe(cfg))
    refusing(PROG, lambda: lost_processes(recipe.setup, lambda: SETUP_LOST, " while setting up"))
    return recipe


@config.parse
def _run(cfg: DictConfig) -> None:
    """Long-short alignment fine-tuning: tune run torchtune_longshort/recipes/longshort_finetune.py --config FILE
    [key=value ...] [~key ...]. FILE: a YAML file (longshort-cp --list names the shipped ones, longshort-cp NAME
    FILE copies one); longshort-validate FILE [key=value ...] checks it without training; its keys and their
    defaults: the README's recipe table."""
    quiet_upstream()
    # Ctrl-C or SIGTERM while it sets up: one line, exit 130 / 143, what the setup made taken back (as a refusal)
    recipe = stoppable(PROG, lambda: _set_up(cfg), SETUP_STOPPED)
    try:  # a second stop signal (StopSignals) stops at once; a process of the run lost, in one line too
        recipe.stop_signals.install()
        refusing(PROG, lambda: lost_processes(recipe.train, recipe.ckpts.standing))
        recipe.cleanup()
    except BaseException as e:
        recipe.release_output_dir()
        if isinstance(e, KeyboardInterrupt):
            stopped(PROG, getattr(e, "signum", signal.SIGINT), at_once(recipe.ckpts))
        raise
    if recipe.stopped_by:
        sys.exit(128 + recipe.stopped_by)  # the shell's convention for "ended by a signal"


if __name__ == "__main__":
    sys.exit(recipe_main())
