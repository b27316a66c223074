"""The recipe's checkpoint save (:class:`RecipeSaving`, a base of ``LongShortFinetuneRecipe``): ``step_<k>`` written
whole or not at all (:mod:`.checkpointing`), a full disk said in one line with the last resumable step
(:mod:`.out_of_space`), and the save at which the disk fills forecast again from each checkpoint's real size.

It reads what :class:`~.recipe_setup.RecipeSetup` and the recipe set up (``_model``, ``_optimizer``, ``ckpts``,
``global_step``, ``config``, ...)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

from torchtune import utils

from torchtune_longshort.devices import out_of_memory_in, rank_rng_states
from torchtune_longshort.disk_space import is_out_of_space, note_room, room
from torchtune_longshort.training import out_of_space, recipe_checkpoints
from torchtune_longshort.training.out_of_space import OutOfSpace

log = utils.get_logger("INFO")


def run_latest(ckpts, through: Optional[int] = None) -> Optional[Path]:
    """The newest complete step folder of ``ckpts`` (a :class:`~.checkpointing.StepCheckpoints`) that is the run's:
    none past ``through`` (its ``max_steps``: a run never saves there; a user's whole ``step_9/`` beside a resume of 8
    steps was named as the run's checkpoint) but the one ``resume=True`` continues from."""
    own = ckpts.run_steps(through)
    return ckpts.path(own[-1]) if own else None


def latest_checkpoint_said(ckpts, through: Optional[int] = None) -> str:
    """The run's newest complete step folder (:func:`run_latest`), as the run's last line names it; one without its
    recipe state (a cut save's ``old_step_<k>`` put back) says so and names the step ``resume=True`` continues from
    (the weights-only step was named alone, after "Nothing to train: resumed at step 2")."""
    last, resumable = run_latest(ckpts, through), ckpts.latest(resumable=True)
    if last is None or last == resumable:
        return str(last)
    return (f"{last} (weights only: no recipe state; resume=True continues from "
            f"{resumable if resumable is not None else 'no step of this run'})")


class RecipeSaving:
    """``save_checkpoint``, the writing and disk forecast it runs, and the save after running out of memory, for the
    fine-tuning recipe."""

    def save_checkpoint(self) -> None:
        """Write ``step_<k>`` whole or not at all (see ``torchtune_longshort.training.checkpointing``)."""
        step = self.global_step
        model_sd, opt_sd = recipe_checkpoints.full_state_dicts(
            self._model, self._optimizer, self._distributed, self._is_rank_zero, self._device
        )
        rank_rngs = rank_rng_states(self._distributed)  # every rank's dropout stream, for an exact resume
        if self._is_rank_zero:
            try:
                final = self._write_checkpoint(step, model_sd, opt_sd, rank_rngs)
            except Exception as e:
                if not is_out_of_space(e, self.ckpts.root):  # a folder made read-only: one line, as at the commit
                    raise (self.ckpts.refused(step, e) if isinstance(e, OSError) else e)
                note_room(e, self.ckpts.root)  # the room the save found, before the cleanup below frees what it took
                with contextlib.suppress(OSError):  # a clean-up the full disk stops too: this line still ends the run
                    self.ckpts.clean_staging()  # what it staged frees its room; the step folders stay whole
                raise OutOfSpace(out_of_space.stop_message(
                    f"checkpoint step_{step}", step, self.ckpts, self._checkpoint_bytes, self._saved_step is not None,
                    e, self.max_steps,
                )) from None
            self._checkpoint_bytes, sizes = out_of_space.saved(final)
            log.info(f"Checkpoint for step {step} written to {final} ({sizes})")
            self._forecast_room(final, step)
        self._saved_step = step
        self._barrier()

    def _forecast_room(self, saved, step: int) -> None:
        """Say again at which save the disk fills when the checkpoint just ``saved`` (its real size) moves it."""
        plan = out_of_space.measured_plan(saved, self.ckpts, out_of_space.save_steps(
            step, self.stop_at, self.max_steps, self.config.save_every_n_steps))
        fills_at = plan.fills_at(room(self.output_dir)[0])
        if fills_at is not None and fills_at != self._disk_fills_at:
            log.info(out_of_space.forecast(self.output_dir, plan, fills_at, True))
        self._disk_fills_at = fills_at

    def _write_checkpoint(self, step: int, model_sd, opt_sd, rank_rngs=None):
        self.ckpts.clean_staging()
        staged = self.ckpts.staging_root / f"step_{step}"
        state = recipe_checkpoints.training_state(
            step, opt_sd, self._lr_scheduler, self._batcher, self.generators, self._run_config, self._start_digest,
            rank_rngs)
        hf_config = recipe_checkpoints.hf_config_for_save(self._base_hf_config, self.rope_spec, self._model)
        recipe_checkpoints.stage_step(
            staged, model_sd, self._lora, hf_config, self.rope_spec, recipe_checkpoints.tokenizer_source(self.config),
            state,
        )
        if self.before_commit is not None:
            self.before_commit(step, staged)
        return self.ckpts.commit(staged, step)

    def _save_after_out_of_memory(self):
        """The last good step's folder, saved now when it was not (one process only: under torchrun the other ranks
        are inside the failed step's collectives, and torchrun stops them when this one exits; and not when the
        optimizer's update failed part-way); the last resumable one, else None."""
        if (self.global_step > 0 and self._saved_step != self.global_step and not self._distributed
                and not self._in_optimizer_step):
            out_of_memory_in(self.save_checkpoint)  # out of memory again: the last resumable one stands
        latest = self.ckpts.latest(resumable=True)
        return None if latest is None else str(latest)
