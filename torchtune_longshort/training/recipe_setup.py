"""The long-short recipe up to its first step: the config checked before any side effect, the process (group,
device, dtype, seed), then the tokenizer, data, output folder, model, loss, optimizer, LR schedule and batcher.

:class:`RecipeSetup` is the base of :class:`~torchtune_longshort.recipes.longshort_finetune.LongShortFinetuneRecipe`
(``torchtune_longshort/recipes/longshort_finetune.py``, the file ``tune run`` runs), which adds the training loop,
the checkpoints and the cleanup. Each ``_setup_*`` method is short: the components it builds, and their checks, are
the library's (``training.model_setup``, ``training.data_setup``, ``training.recipe_checkpoints``, ...).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchtune import config, training, utils

from torchtune_longshort.launcher import launched_rank, launched_world_size
from torchtune_longshort.data.dual_window import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.disk_space import is_out_of_space, note_room, reason, room_then
from torchtune_longshort.devices import cpu_oversubscribed, set_rank_rng_states
from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder, load_rope_parameters
from torchtune_longshort.models.hf_tokenizer import tokenizer_bytes
from torchtune_longshort.models.rope_scaling import learned_parameters_from
from torchtune_longshort.refusals import Refusal
from torchtune_longshort.training import recipe_checkpoints
from torchtune_longshort.training.activation_memory import set_activation_memory
from torchtune_longshort.training.bootstrap import discard_trained_tokenizer
from torchtune_longshort.training.checkpointing import StepCheckpoints
from torchtune_longshort.training.compile_setup import compile_decoder
from torchtune_longshort.training.tiled_mlp import tile_mlps
from torchtune_longshort.training.cpu_allocator import cpu_notes
from torchtune_longshort.training.data_setup import (
    build_documents, build_position_sampler, check_corpus_length, check_first_sample, check_shuffle_source,
    data_summary, earlier_position_draw, validation_sequences,
)
from torchtune_longshort.training.equal_compute import trained_steps
from torchtune_longshort.training.learned_rope import rope_generator, start_learned_rope
from torchtune_longshort.training.metrics import RunLog, resumed_lines
from torchtune_longshort.training.model_setup import (
    build_model, check_quantized_shapes, initial_adapters, load_weights, resumed_weights, set_trainable,
)
from torchtune_longshort.training.out_of_space import (
    CheckpointPlan, OutOfSpace, check_checkpoint_room, forecast, save_steps, state_bytes, tree_bytes, weight_bytes,
)
from torchtune_longshort.training.output_dir import claim_output_dir
from torchtune_longshort.training.overwrite_rules import overwrite_advice
from torchtune_longshort.training.profiling import StepProfiler
from torchtune_longshort.training.recipe_config import (
    check_built_model, check_tokenizer_vocab, check_window_bos, declared_vocab, input_paths, load_recipe_config,
    load_tokenizer, model_key_of, resolved_config, written_names,
)
from torchtune_longshort.training.resume import (
    apply_resume_changes, check_skipped_records, read_resume_state, recorded_seed, restore_optimizer, resume_changes,
)
from torchtune_longshort.training.written_files import METRICS_FILE

log = utils.get_logger("INFO")


class RecipeSetup:
    """Construction and setup of the long-short recipe (see the module docstring). The constructor reads and checks
    the config (:func:`~torchtune_longshort.training.recipe_config.load_recipe_config`) before a process group, an
    output folder or a weight exists; :meth:`setup` builds everything else."""

    def __init__(self, cfg: DictConfig) -> None:
        written, self.cfg = cfg, resolved_config(cfg)  # its paths expanded and resolved once: ~, relative, symlinks
        cfg = self.cfg
        world_size = launched_world_size()
        self._distributed = world_size > 1
        # Every check that needs no model runs first: before a process group, an output folder or a weight exists.
        # Given the config as written: a refused value that interpolates another key names that key (naming_the_source)
        self.config = config_ = load_recipe_config(written, world_size)
        self.micro_batch = config_.batch_size // (world_size * config_.gradient_accumulation_steps)
        # Appendix F: a regularized run gets the baseline's compute, not its step count.
        self.max_steps = trained_steps(config_.max_steps, config_.equal_compute_overhead, config_.loss.alpha)
        if self.max_steps != config_.max_steps:
            log.info(f"equal_compute_overhead={config_.equal_compute_overhead}: max_steps {config_.max_steps} -> "
                     f"{self.max_steps} for alpha > 0")
        self._device = utils.get_device(device=config_.device)
        if cfg.get("device", "cpu") is None:  # torchtune's null: where this run trains, said
            utils.log_rank_zero(log, f"device=null: training on {self._device} (torchtune's get_device(None): cuda "
                                "where this machine has it, else cpu)")
        oversubscribed = cpu_oversubscribed(self._device, world_size)
        if oversubscribed and launched_rank() == 0:  # said once, before the process group gathers them
            log.warning(oversubscribed)
        if self._distributed:
            # gloo on CPU; nccl for CUDA (torchtune picks it from the device type).
            backend = training.get_distributed_backend(self._device.type)
            torch.distributed.init_process_group(backend=backend)
        self.world_size, self.rank = utils.get_world_size_and_rank()
        self._is_rank_zero = self.rank == 0
        self._dtype = training.get_dtype(config_.dtype, device=self._device)
        for note in cpu_notes(self._device, self._dtype, config_.cpu_keep_freed_blocks):  # every rank applies it
            utils.log_rank_zero(log, note)
        # seed: null (torchtune's): one seed drawn on rank 0 and broadcast, then recorded as the run's seed (a resume
        # takes the run's recorded one instead, _setup_output_dir)
        self._seed_drawn = config_.seed is None
        self.seed = training.set_seed(seed=config_.seed, debug_mode=config_.cudnn_deterministic_mode)
        self._run_config = OmegaConf.to_container(cfg, resolve=True)  # saved with each step, compared on resume
        if config_.resume:  # a change it refuses, refused before the lock file (compared again under the lock)
            resume_changes(Path(config_.output_dir), self._run_config)
        if self._seed_drawn:
            self._record_seed(self.seed)
        self.output_dir = Path(config_.output_dir)
        self.global_step = 0
        self.finished = False  # resume=True of a run already at its last step: setup builds nothing (setup())

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Build everything; on failure the output folder's lock is given back (a folder this run made, removed)."""
        self._lock = self._metric_logger = self._staged_start = None
        self._trained_tokenizer = self.config.tokenizer.trains_here()  # a tokenizer folder this run will train
        try:
            self._setup()
        except BaseException as e:
            note_room(e, self.output_dir)  # the room the setup found, before the cleanups below free what it wrote
            if self._metric_logger is not None:  # started, then the setup refused: its run ends (wandb's too)
                with contextlib.suppress(Exception):
                    self._metric_logger.close()
            if self._staged_start is not None:  # step_0 of a refused setup, never committed (an earlier run's stay)
                recipe_checkpoints.discard_scratch_start(self.ckpts)
            self.release_output_dir(discard=True)
            if self._trained_tokenizer is not None:  # this run's, refused (kept while another run reads it)
                discard_trained_tokenizer(self._trained_tokenizer)
            if isinstance(e, Exception) and not isinstance(e, Refusal) and is_out_of_space(e):
                have = room_then(e, self.output_dir, "the setup failed")
                raise OutOfSpace(f"no space left on the disk while setting up output_dir {self.output_dir} ({have}): "
                                 f"{reason(e)}; free space there, or set output_dir to a disk with room") from None
            raise

    def _setup(self) -> None:
        # Inputs first: a tokenizer that does not fit the model, or data unreadable or too short, leaves no folder
        # (nor the tokenizer folder this run trained).
        cfg = self.config
        self._tokenizer = load_tokenizer(cfg.tokenizer, model_key_of(cfg))
        check_tokenizer_vocab(cfg, self._tokenizer)
        check_window_bos(cfg, self._tokenizer)
        self._documents = build_documents(cfg.dataset, self._tokenizer)
        check_shuffle_source(self._documents, cfg.shuffle)
        if not cfg.resume:
            check_corpus_length(self._documents, self._tokenizer, cfg.seq_len + cfg.windows.e_bounds[1] + 1)
        self._val_tokens = validation_sequences(cfg.validation, self._tokenizer, self._tokenize,
                                                declared_vocab(cfg)[0])
        recipe_state = self._setup_output_dir()
        if recipe_state is not None and self.global_step >= self.stop_at:
            # a job scheduler's requeue of a finished run: nothing to train, so no model, data or log is made; a last
            # save killed between its step folder's rename and its state's move is finished, as a finished run's
            # folder holds its last state alone (keep_recipe_states), no .staging/
            self.finished = True
            if self._is_rank_zero:
                self.ckpts.clean_staging()
                self._lock.remove_killed_writes()
            return
        # metrics.jsonl's lines a resume keeps, read and checked now: a bad line is refused before the logger starts
        # (a log file, torchtune_config.yaml rewritten) or anything else is written
        self._metrics_kept = resumed_lines(self.output_dir / METRICS_FILE, self.global_step)
        self._model = self._setup_model(recipe_state)
        self._loss_fn = self._setup_loss()
        self._optimizer = self._setup_optimizer()
        self._lr_scheduler = self._setup_lr_scheduler()
        if recipe_state is not None:
            self._restore_optimizer(recipe_state)
        self._batcher = self._setup_data(recipe_state)
        self._clear_earlier_run()
        self._barrier()
        self._run_log = RunLog.open(self._metric_logger, self.cfg, self.output_dir, self.global_step, self._device,
                                    seed=self.seed, keep=self._metrics_kept)
        # the logger's files, so that overwrite deletes its folder only when it holds no other
        if self._lock is not None:
            self._lock.record_written()
        self._profiler = StepProfiler(self.config.profiler, self.config.trace_dir, self._device,
                                      self.stop_at - self.global_step, lambda msg: utils.log_rank_zero(log, msg),
                                      first_step=self.global_step)
        if recipe_state is not None:
            set_rank_rng_states(recipe_state, self.rank, self.world_size)
            utils.log_rank_zero(log, f"Resumed from {self._resume_dir} at step {self.global_step}")

    def _setup_output_dir(self) -> Optional[Dict[str, Any]]:
        """Claim ``output_dir`` (rank 0), find the checkpoint to resume from and return its recipe state."""
        resume = self.config.resume
        if self._is_rank_zero:
            self._lock = claim_output_dir(self.output_dir, resume=resume, overwrite=self.config.overwrite_output_dir,
                                          protect=input_paths(self.config), written_here=written_names(self.config),
                                          max_steps=self.max_steps)
        self._barrier()
        restart = (input_paths(self.config), written_names(self.config))  # what the overwrite it advises keeps
        self.ckpts = StepCheckpoints(self.output_dir, keep=self.config.keep_recipe_states,
                                     restart=lambda: overwrite_advice(self.output_dir, *restart))
        self._resume_dir = self.ckpts.latest(resumable=True) if resume else None
        if resume and self.config.overwrite_output_dir:
            utils.log_rank_zero(log, "resume=True and overwrite_output_dir=True: the run resumes, and "
                                     "overwrite_output_dir deletes nothing")
        if self._resume_dir is None:
            if self._seed_drawn:
                utils.log_rank_zero(log, f"seed: null drew seed={self.seed} (give seed={self.seed} to repeat this run)")
            return None
        recipe_state, self._resume_changes = read_resume_state(self._resume_dir, self._run_config,
                                                               seed_from_state=self._seed_drawn,
                                                               restart=self.ckpts.restart)
        if self._seed_drawn and recorded_seed(recipe_state) is not None:  # the run's seed, as an explicit resume's
            self._record_seed(training.set_seed(seed=recorded_seed(recipe_state),
                                                debug_mode=self.config.cudnn_deterministic_mode))
            utils.log_rank_zero(log, f"seed: null: resume=True continues with the run's recorded seed={self.seed}")
        check_skipped_records(recipe_state, self.config.dataset.skip_bad_records)
        self.global_step = int(recipe_state["step"])
        return recipe_state

    def _record_seed(self, seed: int) -> None:
        """Make ``seed`` the run's seed wherever it is read (``self.seed``, the typed config's ``seed`` and
        ``order_seed``) and recorded (the config that torchtune_config.yaml, the recipe state and metrics.jsonl
        keep): a ``seed: null`` run's draw, or on resume the run's recorded seed."""
        self.seed = seed
        self.config = dataclasses.replace(self.config, seed=seed)
        self.cfg.seed = seed
        self._run_config["seed"] = seed

    def _setup_model(self, recipe_state: Optional[Dict[str, Any]]) -> nn.Module:
        """Build ``model``, load its start weights (and a resumed run's adapters / learned RoPE), make the right
        parameters trainable, shard it across ranks when distributed."""
        cfg = self.config
        step_spec = CheckpointFolder.open(self._resume_dir).rope_spec if self._resume_dir is not None else None
        with learned_parameters_from(step_spec):  # a resumed step's learned RoPE, not the start's, is what loads
            model, self._lora = build_model(cfg.model.resumed_node(step_spec), self._device, self._dtype,
                                            on_meta=self._distributed)
        self.rope_spec = getattr(model, "rope_scaling", None)
        check_quantized_shapes(model, self.world_size)
        set_trainable(model, self._lora, cfg.train_embeddings_and_norms)
        self._check_room(model)
        model_sd, self._start_dir, read_dir = recipe_checkpoints.start_state_dict(
            cfg, self.ckpts, self._resume_dir, self._lora, self.seed, self._is_rank_zero, self._barrier)
        self._start_digest = recipe_checkpoints.check_start_unchanged(recipe_state, self._start_dir, read_dir,
                                                                       self._lora, self.ckpts.restart)
        if read_dir != self._start_dir and self._is_rank_zero:
            self._staged_start = read_dir  # step_0 from scratch: committed when the setup has succeeded
        # The base config.json every step_k is written with (its RoPE entries replaced by the model's).
        self._base_hf_config = CheckpointFolder.open(read_dir).config
        self._forward = set_activation_memory(model, cfg.enable_activation_checkpointing,
                                              cfg.enable_activation_offloading)
        tile_mlps(model, cfg.tiled_mlp_tokens, lambda msg: utils.log_rank_zero(log, msg))
        self.compiled = compile_decoder(model, cfg.compile, lambda msg: utils.log_rank_zero(log, msg))
        trainable = recipe_state.get("trainable") if (recipe_state and self._lora.enabled) else None
        if self._lora.enabled and trainable is None:  # a new run: the same adapters whatever the process count
            trainable = initial_adapters(model, self.seed)
        # a new run's learned RoPE (CLEX's ODE): the start checkpoint's own, else drawn, like its adapters, the same
        # whatever the process count
        learned_rope = (load_rope_parameters(self._resume_dir) if self._resume_dir is not None
                        else start_learned_rope(model, read_dir, self.seed))
        self._rope_generator = rope_generator(model, self.seed, recipe_state)
        load_weights(
            model, model_sd, resumed_weights(model, trainable, learned_rope), distributed=self._distributed,
            device=self._device, dtype=self._dtype, reshard_after_forward=cfg.fsdp_reshard_after_forward,
            where=f"checkpoint {str(self._start_dir)!r} does not fit model {cfg.model.component}",
            fix=CheckpointFolder.open(read_dir).config_fix,
        )
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        utils.log_rank_zero(log, f"Model ready: {n_train:,} trainable parameters, dtype {self._dtype}")
        self.model_vocab = check_built_model(cfg, model, self._tokenizer, self.rope_spec)
        return model

    def _check_room(self, model: nn.Module) -> None:
        """The disk's room for this run's checkpoints (``training.out_of_space``), before its first write: a step_0
        from scratch (float32) and the first save (weights and optimizer state) are refused when they cannot fit; all
        its saves, noted."""
        cfg = self.config
        source = recipe_checkpoints.tokenizer_source(cfg)  # every step folder carries its tokenizer files
        tokenizer = tokenizer_bytes(source) if source else 0
        weights = weight_bytes(model, self._dtype, self._lora.enabled) + tokenizer
        state = state_bytes(model, cfg.optimizer.node(), self._dtype)
        self._checkpoint_bytes = weights + state
        scratch = cfg.checkpointer.checkpoint_dir is None and self._resume_dir is None
        earlier = self._lock is not None and self._lock.earlier_run is not None  # overwrite deletes it
        plan = CheckpointPlan(
            weights, state, cfg.keep_recipe_states, len(self.ckpts.states()) if self._resume_dir else 0,
            weight_bytes(model, torch.float32, False) + tokenizer if scratch else 0,
            save_steps(self.global_step, self.stop_at, self.max_steps, cfg.save_every_n_steps),
        )
        reclaimed = tree_bytes(self.output_dir) if earlier else 0
        self._disk_fills_at = check_checkpoint_room(self.output_dir, plan, reclaimed)
        if self._disk_fills_at is not None:
            utils.log_rank_zero(log, forecast(self.output_dir, plan, self._disk_fills_at, False, reclaimed))

    @property
    def stop_at(self) -> int:
        """The step this process ends at: ``max_steps``, or ``stop_after_step`` (job time limits; the LR schedule
        still spans ``max_steps`` and ``resume=True`` continues exactly where it stopped)."""
        return min(self.max_steps, self.config.stop_after_step or self.max_steps)

    def nothing_to_train(self) -> str:
        """What a resumed run already at its last step says."""
        limit = (f"stop_after_step={self.stop_at} (raise or drop it" if self.stop_at < self.max_steps
                 else f"max_steps={self.max_steps} (raise it")
        return (f"Nothing to train: resumed at step {self.global_step} ({self._resume_dir}), and this run ends at "
                f"step {self.stop_at}: {limit} to train on)")

    def stopped_early(self) -> str:
        """What a process ended by ``stop_after_step`` says (else only the summary lines of a finished run)."""
        return (f"stop_after_step={self.stop_at} reached: step {self.stop_at} of {self.max_steps} saved at "
                f"{self.ckpts.path(self.stop_at)}; continue with resume=True")

    def _setup_loss(self) -> LongShortLoss:
        loss_fn = config.instantiate(self.config.loss.node())  # a LongShortLoss (checked with the config)
        loss_fn.set_model_output(self._model)
        utils.log_rank_zero(
            log, f"Loss path: {loss_fn.output_path} (output module {type(loss_fn.linear_projection).__name__})"
        )
        if loss_fn.gradient_note():
            utils.log_rank_zero(log, f"Loss: {loss_fn.gradient_note()}")
        return loss_fn

    def _setup_optimizer(self):
        trainable = [p for p in self._model.parameters() if p.requires_grad]
        return config.instantiate(self.config.optimizer.node(), trainable)

    def _setup_lr_scheduler(self):
        if self.config.lr_scheduler is None:
            return None
        return self._lr_scheduler_of(self._optimizer, self.max_steps)

    def _lr_scheduler_of(self, optimizer, max_steps: int):
        return config.instantiate(self.config.lr_scheduler.node(), optimizer, num_training_steps=max_steps,
                                  last_epoch=-1)

    def _schedule_at(self, max_steps: int):
        """The config's lr schedule for ``max_steps`` on a stand-in optimizer at lr 1: its factors, step by step."""
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return optimizer, self._lr_scheduler_of(optimizer, max_steps)

    def _restore_optimizer(self, recipe_state: Dict[str, Any]) -> None:
        """Optimizer and LR schedule from the recipe state, then the changes a resumed run means."""
        restore_optimizer(
            recipe_state, self._model, self._optimizer, self._lr_scheduler, self._distributed, self._device
        )
        apply_resume_changes(
            self._resume_changes, self._optimizer, self._lr_scheduler, lambda msg: utils.log_rank_zero(log, msg),
            None if self._lr_scheduler is None else self._schedule_at,
        )

    @property
    def generators(self) -> Dict[str, Optional[torch.Generator]]:
        """The run's seeded generators that every rank shares, by their recipe-state key (None: not used)."""
        return {"position_generator": self._pos_generator, "rope_generator": self._rope_generator}

    def _clear_earlier_run(self) -> None:
        """Start the metric logger (rank 0), then delete the earlier run that ``overwrite_output_dir`` replaces, at
        the run's first write into its folder: once the whole setup has succeeded (a from-scratch ``step_0``, written
        into ``.staging``, is committed here), so a setup that refuses leaves the earlier run whole, a logger that
        cannot start (wandb without a login, a log_dir it cannot write) too. A no-op once done."""
        if self._lock is not None and self._metric_logger is None:
            self._metric_logger = self._lock.clear_earlier_run(
                lambda: RunLog.start_logger(self.config.metric_logger.node()))
        if self._staged_start is not None:
            self.ckpts.commit(self._staged_start, 0)
            self._staged_start = None
            self.ckpts.clean_staging()  # what the earlier run that overwrite replaced staged (discard_scratch_start)

    def _barrier(self) -> None:
        if self._distributed:
            torch.distributed.barrier()

    def _tokenize(self, text: str):
        return self._tokenizer.encode(text, add_bos=True, add_eos=True)

    def _setup_data(self, recipe_state: Optional[Dict[str, Any]]) -> DualWindowBatcher:
        """The dual-window batcher (resumed at its saved position) and the optional position sampler."""
        cfg = self.config
        stream = PackedTokenStream(self._documents, tokenize=self._tokenize, vocab_size=self.model_vocab,
                                   shuffle_seed=cfg.order_seed if cfg.shuffle else None)
        batcher = DualWindowBatcher(
            stream, L=cfg.seq_len, e_range=list(cfg.windows.e_range), batch_size=self.micro_batch,
            seed=cfg.order_seed, rank=self.rank, world_size=self.world_size, ignore_index=self._loss_fn.ignore_index,
            bos_id=self._tokenizer.bos_id if cfg.windows.window_bos else None,
        )
        if recipe_state is not None:
            batcher.load_state_dict(recipe_state["data"])
        else:
            check_first_sample(self._documents, self._tokenize, self.model_vocab, cfg.seq_len + batcher.e_hi + 1)
        utils.log_rank_zero(log, data_summary(self._documents, batcher, cfg.gradient_accumulation_steps, cfg.shuffle))
        self._pos_sampler, self._pos_generator = build_position_sampler(
            cfg.position_sampler.node() if cfg.position_sampler else None, getattr(self._model, "max_seq_len", None),
            cfg.order_seed, recipe_state,
        )
        earlier = earlier_position_draw(recipe_state, self._pos_sampler, self.micro_batch * self.world_size)
        if earlier:
            utils.log_rank_zero(log, earlier, level=logging.WARNING)
        return batcher

    def release_output_dir(self, discard: bool = False) -> None:
        """Give up the output folder's lock (also after a failure); ``discard``: remove a folder this run made."""
        if getattr(self, "_lock", None) is not None:
            self._lock.release(discard=discard)
