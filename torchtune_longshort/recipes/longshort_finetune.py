"""Long-short alignment fine-tuning (Du et al., ICML 2025) as a torchtune recipe.

    tune run torchtune_longshort/recipes/longshort_finetune.py --config configs/tiny/longshort_stdlib.yaml [key=value ...]
    tune run --nproc_per_node 2 torchtune_longshort/recipes/longshort_finetune.py --config my.yaml [key=value ...]

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

import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchtune import config, training, utils

from torchtune_longshort._quiet import quiet_upstream
from torchtune_longshort.data.dual_window import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.data.text_files import DataRecordError
from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder, load_rope_parameters
from torchtune_longshort.refusals import refusing
from torchtune_longshort.training import recipe_checkpoints
from torchtune_longshort.training.activation_memory import set_activation_memory
from torchtune_longshort.training.checkpointing import StepCheckpoints, claim_output_dir
from torchtune_longshort.training.compile_setup import compile_decoder
from torchtune_longshort.training.cpu_allocator import cpu_notes
from torchtune_longshort.training.data_setup import (
    StepStart, build_documents, build_position_sampler, check_corpus_length, check_first_sample, validation_sequences,
)
from torchtune_longshort.training.equal_compute import trained_steps
from torchtune_longshort.training.metrics import RunLog, mean_over_ranks
from torchtune_longshort.training.model_setup import (
    build_model, check_quantized_shapes, load_weights, resumed_weights, set_trainable,
)
from torchtune_longshort.training.recipe_config import (
    check_built_model, check_tokenizer_vocab, declared_vocab, input_paths, load_recipe_config, resolved_config,
    written_names,
)
from torchtune_longshort.training.resume import apply_resume_changes, read_resume_state, restore_optimizer
from torchtune_longshort.training.step_checks import check_finite_loss, clip_gradients
from torchtune_longshort.training.stop_signals import StopSignals
from torchtune_longshort.training.validation import validation_metrics
from torchtune_longshort.windows import unstack_window_outputs

log = utils.get_logger("INFO")


class LongShortFinetuneRecipe:
    """Full / LoRA / QLoRA fine-tuning with ``ce + alpha * misalignment`` on dual-window batches.

    The config's fields, with their defaults and checks, are :class:`~torchtune_longshort.training.recipe_config.
    RecipeConfig` and its sections (the README's table is generated from them); configs/tiny/longshort_stdlib.yaml is
    a complete, commented example. The constructor builds and checks it before any side effect.
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg = resolved_config(cfg)  # its paths expanded and resolved once: ~, relative, symlinks
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self._distributed = world_size > 1
        # Every check that needs no model runs first: before a process group, an output folder or a weight exists.
        self.config = config_ = load_recipe_config(cfg, world_size)
        self._run_config = OmegaConf.to_container(cfg, resolve=True)  # saved with each step, compared on resume
        self.micro_batch = config_.batch_size // (world_size * config_.gradient_accumulation_steps)
        # Appendix F: a regularized run gets the baseline's compute, not its step count.
        self.max_steps = trained_steps(config_.max_steps, config_.equal_compute_overhead, config_.loss.alpha)
        if self.max_steps != config_.max_steps:
            log.info(f"equal_compute_overhead={config_.equal_compute_overhead}: max_steps {config_.max_steps} -> "
                     f"{self.max_steps} for alpha > 0")
        self._device = utils.get_device(device=config_.device)
        if self._distributed:
            # gloo on CPU; nccl for CUDA (torchtune picks it from the device type).
            backend = training.get_distributed_backend(self._device.type)
            torch.distributed.init_process_group(backend=backend)
        self.world_size, self.rank = utils.get_world_size_and_rank()
        self._is_rank_zero = self.rank == 0
        self._dtype = training.get_dtype(config_.dtype, device=self._device)
        for note in cpu_notes(self._device, self._dtype, config_.cpu_keep_freed_blocks):
            log.info(note)
        self.seed = training.set_seed(seed=config_.seed)
        self.output_dir = Path(config_.output_dir)
        self.global_step = 0
        self._saved_step = None  # the step of the last checkpoint this process wrote
        self.stop_signals = StopSignals()  # recipe_main installs its handlers
        self.stopped_by = 0
        # (step, staged folder) -> None, called once a checkpoint is fully written, before it is renamed into place
        self.before_commit = None

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Build everything; on failure the output folder's lock is given back (a folder this run made, removed)."""
        self._lock = None
        try:
            self._setup()
        except BaseException:
            self.release_output_dir(discard=True)
            raise

    def _setup(self) -> None:
        # Inputs first: a tokenizer that does not fit the model, or data unreadable or too short, leaves no folder.
        cfg = self.config
        self._tokenizer = config.instantiate(cfg.tokenizer.node())
        check_tokenizer_vocab(cfg, self._tokenizer)
        self._documents = build_documents(cfg.dataset, self._tokenizer)
        if not cfg.resume:
            check_corpus_length(self._documents, self._tokenizer, cfg.seq_len + cfg.windows.e_bounds[1] + 1)
        self._val_tokens = validation_sequences(cfg.validation, self._tokenizer, self._tokenize,
                                                declared_vocab(cfg)[0])
        recipe_state = self._setup_output_dir()
        self._model = self._setup_model(recipe_state)
        self._loss_fn = self._setup_loss()
        self._optimizer = self._setup_optimizer()
        self._lr_scheduler = self._setup_lr_scheduler()
        if recipe_state is not None:
            self._restore_optimizer(recipe_state)
        self._batcher = self._setup_data(recipe_state)
        self._run_log = RunLog.open(self.config.metric_logger.node() if self._is_rank_zero else None, self.cfg,
                                    self.output_dir, self.global_step, self._device)
        if recipe_state is not None:
            torch.set_rng_state(recipe_state["torch_rng"])
            utils.log_rank_zero(log, f"Resumed from {self._resume_dir} at step {self.global_step}")

    def _setup_output_dir(self) -> Optional[Dict[str, Any]]:
        """Claim ``output_dir`` (rank 0), find the checkpoint to resume from and return its recipe state."""
        resume = self.config.resume
        if self._is_rank_zero:
            self._lock = claim_output_dir(self.output_dir, resume=resume, overwrite=self.config.overwrite_output_dir,
                                          protect=input_paths(self.config), written_here=written_names(self.config))
        self._barrier()
        self.ckpts = StepCheckpoints(self.output_dir, keep=self.config.keep_recipe_states)
        self._resume_dir = self.ckpts.latest(resumable=True) if resume else None
        if self._resume_dir is None:
            return None
        recipe_state, self._resume_changes = read_resume_state(self._resume_dir, self._run_config)
        self.global_step = int(recipe_state["step"])
        return recipe_state

    def _setup_model(self, recipe_state: Optional[Dict[str, Any]]) -> nn.Module:
        """Build ``model``, load its start weights (and a resumed run's adapters / learned RoPE), make the right
        parameters trainable, shard it across ranks when distributed."""
        cfg = self.config
        model, self._lora = build_model(cfg.model.node(), self._device, self._dtype, on_meta=self._distributed)
        self.rope_spec = getattr(model, "rope_scaling", None)
        check_quantized_shapes(model, self.world_size)
        model_sd, self._start_dir = recipe_checkpoints.start_state_dict(
            cfg, self.ckpts, self._resume_dir, self._lora, self.seed, self._is_rank_zero, self._barrier
        )
        # The base config.json every step_k is written with (its RoPE entries replaced by the model's).
        self._base_hf_config = CheckpointFolder.open(self._start_dir).config
        set_trainable(model, self._lora, cfg.train_embeddings_and_norms)
        self._forward = set_activation_memory(model, cfg.enable_activation_checkpointing, cfg.enable_activation_offloading)
        self.compiled = compile_decoder(model, cfg.compile, lambda msg: utils.log_rank_zero(log, msg))
        trainable = recipe_state.get("trainable") if (recipe_state and self._lora.enabled) else None
        learned_rope = load_rope_parameters(self._resume_dir) if self._resume_dir is not None else {}
        load_weights(
            model, model_sd, resumed_weights(model, trainable, learned_rope), distributed=self._distributed,
            device=self._device, dtype=self._dtype, reshard_after_forward=cfg.fsdp_reshard_after_forward,
            where=f"checkpoint {str(self._start_dir)!r} does not fit model {cfg.model.component}",
        )
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        utils.log_rank_zero(log, f"Model ready: {n_train:,} trainable parameters, dtype {self._dtype}")
        self.model_vocab = check_built_model(cfg, model, self._tokenizer, self.rope_spec)
        return model

    def _setup_loss(self) -> LongShortLoss:
        loss_fn = config.instantiate(self.config.loss.node())  # a LongShortLoss (checked with the config)
        loss_fn.set_model_output(self._model)
        utils.log_rank_zero(
            log, f"Loss path: {loss_fn.output_path} (output module {type(loss_fn.linear_projection).__name__})"
        )
        return loss_fn

    def _setup_optimizer(self):
        return config.instantiate(self.config.optimizer.node(), [p for p in self._model.parameters() if p.requires_grad])

    def _setup_lr_scheduler(self):
        if self.config.lr_scheduler is None:
            return None
        return config.instantiate(self.config.lr_scheduler.node(), self._optimizer, num_training_steps=self.max_steps,
                                  last_epoch=-1)

    def _restore_optimizer(self, recipe_state: Dict[str, Any]) -> None:
        """Optimizer and LR schedule from the recipe state, then the changes a resumed run means."""
        restore_optimizer(
            recipe_state, self._model, self._optimizer, self._lr_scheduler, self._distributed, self._device
        )
        apply_resume_changes(
            self._resume_changes, self._optimizer, self._lr_scheduler, lambda msg: utils.log_rank_zero(log, msg)
        )

    def _barrier(self) -> None:
        if self._distributed:
            torch.distributed.barrier()

    def _tokenize(self, text: str):
        return self._tokenizer.encode(text, add_bos=True, add_eos=True)

    def _setup_data(self, recipe_state: Optional[Dict[str, Any]]) -> DualWindowBatcher:
        """The dual-window batcher (resumed at its saved position) and the optional position sampler."""
        cfg = self.config
        stream = PackedTokenStream(self._documents, tokenize=self._tokenize, vocab_size=self.model_vocab)
        batcher = DualWindowBatcher(
            stream, L=cfg.seq_len, e_range=list(cfg.windows.e_range), batch_size=self.micro_batch,
            seed=cfg.order_seed, rank=self.rank, world_size=self.world_size, ignore_index=self._loss_fn.ignore_index,
            bos_id=self._tokenizer.bos_id if cfg.windows.window_bos else None,
        )
        if recipe_state is not None:
            batcher.load_state_dict(recipe_state["data"])
        else:
            check_first_sample(self._documents, self._tokenize, self.model_vocab, cfg.seq_len + batcher.e_hi + 1)
        self._pos_sampler, self._pos_generator = build_position_sampler(
            cfg.position_sampler.node() if cfg.position_sampler else None, getattr(self._model, "max_seq_len", None),
            cfg.order_seed, self.rank, recipe_state,
        )
        return batcher

    # ------------------------------------------------------------------ checkpoint
    def save_checkpoint(self) -> None:
        """Write ``step_<k>`` whole or not at all (see ``torchtune_longshort.training.checkpointing``)."""
        step = self.global_step
        model_sd, opt_sd = recipe_checkpoints.full_state_dicts(
            self._model, self._optimizer, self._distributed, self._is_rank_zero, self._device
        )
        if self._is_rank_zero:
            self.ckpts.clean_staging()
            staged = self.ckpts.staging_root / f"step_{step}"
            state = recipe_checkpoints.training_state(
                step, opt_sd, self._lr_scheduler, self._batcher, self._pos_generator, self._run_config
            )
            hf_config = recipe_checkpoints.hf_config_for_save(self._base_hf_config, self.rope_spec, self._model)
            recipe_checkpoints.stage_step(
                staged, model_sd, self._lora, hf_config, self.rope_spec, recipe_checkpoints.tokenizer_source(self.config),
                state,
            )
            if self.before_commit is not None:
                self.before_commit(step, staged)
            final = self.ckpts.commit(staged, step)
            log.info(f"Checkpoint for step {step} written to {final}")
        self._saved_step = step
        self._barrier()

    # ------------------------------------------------------------------ train
    def train(self) -> None:
        cfg, max_steps = self.config, self.max_steps
        save_every = cfg.save_every_n_steps or max_steps
        val_every = (cfg.validation.every_n_steps if cfg.validation else None) or max_steps
        self._model.train()
        if self._device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self._device)
        self._run_log.start(max_steps, self.global_step)
        # stop_after_step: end this process early (job time limits); the LR schedule still spans max_steps and
        # resume=True continues exactly where it stopped.
        stop_at = min(max_steps, cfg.stop_after_step or max_steps)
        while self.global_step < stop_at:
            sums, norms = self._checked_step()
            if self.global_step % cfg.log_every_n_steps == 0 or self.global_step == max_steps:
                lr = self._optimizer.param_groups[0]["lr"]
                self._run_log.log_step(self.global_step, sums, lr, {k: float(v) for k, v in norms.items()},
                                       self._device)
            self._run_log.advance()
            if self._val_tokens is not None and (self.global_step % val_every == 0 or self.global_step == max_steps):
                val = validation_metrics(self._model, self._val_tokens, self._device, self.model_vocab)
                self._run_log.log_validation(self.global_step, val)
            stop_signal = self.stop_signals.received(self._distributed, self._device)
            if self.global_step % save_every == 0 or self.global_step in (max_steps, stop_at) or stop_signal:
                self.save_checkpoint()
            if stop_signal:
                self.stopped_by = stop_signal
                utils.log_rank_zero(
                    log,
                    f"{StopSignals.name(stop_signal)} received: finished step {self.global_step}, saved "
                    f"{self.ckpts.path(self.global_step)}; continue with resume=True",
                )
                break
        self._run_log.close()

    def _checked_step(self):
        """:meth:`_train_step`; a data record that cannot be read ends the run at the last good step, saved as on a
        signal (the record is named; the data position saved is the step's start, so resume reads it again)."""
        start = StepStart(self._batcher, self._pos_generator)
        try:
            return self._train_step()
        except DataRecordError as e:
            start.restore(self._batcher, self._pos_generator)
            self._run_log.close()
            if self.global_step == 0:
                raise DataRecordError(f"{e}. No step had finished: nothing saved; mend the record and start "
                                      "again") from None
            if self._saved_step != self.global_step:
                self.save_checkpoint()
            raise DataRecordError(f"{e}. The last good step is saved: {self.ckpts.path(self.global_step)}; mend the "
                                  "record and continue with resume=True") from None

    def _train_step(self):
        """One optimizer step over ``gradient_accumulation_steps`` micro-batches: ``(logged sums, grad norm)``, the
        sums averaged over the global batch."""
        self._optimizer.zero_grad(set_to_none=True)
        sums = {"loss": 0.0, "ce": 0.0, "misalignment": 0.0, "e": 0.0}
        accum = self.config.gradient_accumulation_steps
        for _ in range(accum):
            batch = self._batcher.next_batch()
            out = self._loss_step(batch)
            (out.loss / accum).backward()
            sums["loss"] += out.loss.item() / accum
            sums["ce"] += out.ce.item() / accum
            sums["misalignment"] += out.misalignment.item() / accum
            sums["e"] += batch["e"] / accum
            self._run_log.tokens += 2 * batch["tokens_a"].numel() * self.world_size  # both windows go through the model
        norms = clip_gradients(
            self._model, self.config.clip_grad_norm,
            lambda: f"{self._where(batch)}, loss {sums['loss']:.6g} (last checkpoint: {self.ckpts.latest()})",
            rope_separately=self.config.clip_rope_separately,
        )
        self._optimizer.step()
        if self._lr_scheduler is not None:
            self._lr_scheduler.step()
        self.global_step += 1
        if self._distributed:  # logged values are the global batch's mean
            mean_over_ranks(sums, ("loss", "ce", "misalignment"), self._device, self.world_size)
        return sums, norms

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
            input_pos = self._pos_sampler.sample(tokens.shape[0], self.config.seq_len, generator=self._pos_generator)
            input_pos = input_pos.to(self._device)
        out_a, out_b = unstack_window_outputs(self._forward(tokens, input_pos=input_pos), ta.shape[0])
        out = self._loss_fn(out_a, out_b, la, lb, batch["e"])
        check_finite_loss(out, lambda: self._where(batch))
        return out

    def release_output_dir(self, discard: bool = False) -> None:
        """Give up the output folder's lock (also after a failure); ``discard``: remove a folder this run made."""
        if getattr(self, "_lock", None) is not None:
            self._lock.release(discard=discard)

    def cleanup(self) -> None:
        self.release_output_dir()
        if self._is_rank_zero:
            self._run_log.close_loggers()
            print(f"[longshort] checkpoint: {self.ckpts.latest()}")
            log_dir = self.config.metric_logger.log_dir or "the metric logger"
            print(f"[longshort] metrics:    {self.output_dir / 'metrics.jsonl'} (and {log_dir})")
        if self._distributed:
            # every rank leaves together: a rank that tears its gloo pairs down while its peer is still flushing
            # (rank 0 writes the logs above) can abort the peer at exit ("terminate called ...", seen once in CI)
            self._barrier()
            torch.distributed.destroy_process_group()


@config.parse
def recipe_main(cfg: DictConfig) -> None:
    """Entry point for ``tune run``; bad input is refused in one line (``torchtune_longshort.refusals``)."""
    quiet_upstream()
    recipe = refusing("longshort_finetune", lambda: LongShortFinetuneRecipe(cfg))
    refusing("longshort_finetune", recipe.setup)
    recipe.stop_signals.install()
    try:
        refusing("longshort_finetune", recipe.train)
    except BaseException:
        recipe.release_output_dir()
        raise
    recipe.cleanup()
    if recipe.stopped_by:
        sys.exit(128 + recipe.stopped_by)  # the shell's convention for "ended by a signal"


if __name__ == "__main__":
    sys.exit(recipe_main())
