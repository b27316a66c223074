"""Long-short alignment fine-tuning (Du et al., ICML 2025) as a torchtune recipe.

    tune run torchtune_longshort/recipes/longshort_finetune.py --config configs/tiny/longshort_stdlib.yaml [key=value ...]
    tune run --nproc_per_node 2 torchtune_longshort/recipes/longshort_finetune.py --config my.yaml [key=value ...]

``tune run`` turns a recipe path into a module name (``torchtune_longshort.recipes.longshort_finetune``) and imports
it, so the command works from any folder once the package is installed (``pip install .``, no ``PYTHONPATH``);
``longshort-cp`` copies the shipped configs. One file serves one process and ``torchrun`` (FSDP2 through
torchtune's ``training.shard_model``; gloo on CPU, nccl on GPU).

Per optimizer step: ``gradient_accumulation_steps`` micro-batches, each a dual-window batch
(``torchtune_longshort.data.DualWindowBatcher``: one shift ``e`` per micro-batch, window A = first L tokens,
window B = last L tokens of an L+e sample) scored by ``LongShortLoss``: ``(ce_A + ce_B)/2 + alpha * SCE``.
``alpha = 0`` is cross-entropy on exactly the same tokens.

``batch_size`` is the *global* number of sequences per optimizer step (the paper's 64); each rank's micro-batch
is ``batch_size / (world_size * gradient_accumulation_steps)``.

Checkpoints: ``output_dir/step_<k>``, each a checkpoint folder of ``torchtune_longshort.models.hf_checkpoint``
(Hugging Face format with the RoPE scaling in config.json, the RoPE side file for CLEX, the tokenizer) and
``recipe_state.pt`` (optimizer, LR schedule, data position, e-sampler RNG), written
under ``.staging`` and renamed into place. ``resume=True`` continues from the newest complete one and reproduces
the uninterrupted run's losses.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchtune import config, modules, training, utils
from torchtune.modules.peft import get_adapter_params, get_merged_lora_ckpt, set_trainable_params

from torchtune_longshort.data.corpus import fixed_length_sequences
from torchtune_longshort.data.dual_window import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.hidden_states import hidden_state_output, project_target_logprobs
from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.models.hf_checkpoint import (
    check_checkpoint_folder,
    load_rope_parameters,
    read_hf_config,
    weight_files,
    write_hf_checkpoint,
)
from torchtune_longshort.models.hf_llama import hf_config_from_llama_kwargs
from torchtune_longshort.training.config_checks import check_recipe_config
from torchtune_longshort.training.resume import compare_resume_config
from torchtune_longshort.training.checkpointing import (
    RECIPE_STATE,
    OutputDirLock,
    check_output_dir,
    StepCheckpoints,
    atomic_torch_save,
    prepare_output_dir,
)
from torchtune_longshort.training.metrics import JsonlMetricLogger, peak_memory_gib

log = utils.get_logger("INFO")


def _model_kwargs(cfg_model: DictConfig) -> Dict[str, Any]:
    """The builder kwargs of the (innermost) model node, looking through ``rope_scaled`` wrappers."""
    node = cfg_model
    while "model" in node and isinstance(node.model, DictConfig):
        node = node.model
    return {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k != "_component_"}


class LongShortFinetuneRecipe:
    """Full / LoRA / QLoRA fine-tuning with ``ce + alpha * misalignment`` on dual-window batches.

    Config fields (see configs/tiny/longshort_stdlib.yaml for a complete, commented example): ``model``, ``tokenizer``,
    ``checkpointer`` (``checkpoint_dir: null`` trains from random weights with the model's explicit dimensions),
    ``dataset`` (a documents callable from ``torchtune_longshort.data.corpus``), ``seq_len`` (L), ``e_range``,
    ``batch_size`` (global), ``gradient_accumulation_steps``, ``max_steps``, ``loss``, ``optimizer``,
    ``lr_scheduler``, ``clip_grad_norm``, ``dtype``, ``device``, ``compile``, ``enable_activation_checkpointing``,
    ``train_embeddings_and_norms`` (LoRA), ``save_every_n_steps``, ``resume``, ``overwrite_output_dir``,
    ``metric_logger``, ``log_every_n_steps``, ``validation`` (optional), ``position_sampler`` (optional: a
    ``torchtune_longshort.rope`` position-id sampler, e.g. PoSE), ``seed``.
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self._distributed = world_size > 1
        # Input checks that need no model run first: before a process group, an output folder or a weight exists.
        self._validate_static(world_size)
        self._device = utils.get_device(device=cfg.get("device", "cpu"))
        if self._distributed:
            # gloo on CPU; nccl for CUDA (torchtune picks it from the device type).
            backend = training.get_distributed_backend(self._device.type)
            torch.distributed.init_process_group(backend=backend)
        self.world_size, self.rank = utils.get_world_size_and_rank()
        self._is_rank_zero = self.rank == 0
        self._dtype = training.get_dtype(cfg.get("dtype", "fp32"), device=self._device)
        self.seed = training.set_seed(seed=cfg.get("seed", 0))
        self.output_dir = Path(cfg.output_dir)
        self.global_step = 0
        self._signal = 0  # set by the SIGTERM/SIGINT handler (recipe_main installs it)
        self.stopped_by = 0
        # Called with (step, staged folder) after a checkpoint is fully written and before it is renamed into
        # place: a place for a caller's own check or copy (and for tests that kill a save in flight).
        self.before_commit = None

    # ------------------------------------------------------------------ checks that need no model
    def _validate_static(self, world_size: int) -> None:
        cfg = self.cfg
        self.world_size = world_size
        derived = check_recipe_config(cfg, world_size)
        self.micro_batch = derived["micro_batch"]
        self.grad_accum = cfg.get("gradient_accumulation_steps", 1)
        overhead = cfg.get("equal_compute_overhead")
        if overhead is not None and float(cfg.loss.get("alpha", 0.0)) > 0:
            # Appendix F: the regularized run gets the baseline's compute, not its step count.
            from torchtune_longshort.training.equal_compute import equal_compute_steps

            steps = equal_compute_steps(cfg.max_steps, overhead)
            log.info(f"equal_compute_overhead={overhead}: max_steps {cfg.max_steps} -> {steps} for alpha > 0")
            cfg.max_steps = steps
        start = cfg.checkpointer.get("checkpoint_dir")
        if start is not None:
            if not Path(start).is_dir():
                raise FileNotFoundError(f"checkpointer.checkpoint_dir={start!r} does not exist or is not a directory")
            check_checkpoint_folder(start)
        if start is None and not cfg.get("resume", False):
            hf_config_from_llama_kwargs(_model_kwargs(cfg.model))  # explicit dimensions are required from scratch

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Build everything; on failure the output folder's lock is given back before the error propagates."""
        self._lock = None
        try:
            self._setup()
        except BaseException:
            self.release_output_dir()
            raise

    def _setup(self) -> None:
        cfg = self.cfg
        resume = bool(cfg.get("resume", False))
        if self._is_rank_zero:
            protect = [p for p in (cfg.checkpointer.get("checkpoint_dir"), cfg.tokenizer.get("path")) if p]
            rules = dict(resume=resume, overwrite=bool(cfg.get("overwrite_output_dir", False)), protect=protect)
            check_output_dir(self.output_dir, **rules)  # refuse before the lock file is written
            self._lock = OutputDirLock(self.output_dir).acquire()
            prepare_output_dir(self.output_dir, **rules)
        self._barrier()
        self.ckpts = StepCheckpoints(self.output_dir)
        resume_dir = self.ckpts.latest(resumable=True) if resume else None
        self._resume_dir = resume_dir
        recipe_state = torch.load(resume_dir / RECIPE_STATE, weights_only=False) if resume_dir else None
        self._resume_changes = []
        if recipe_state is not None:
            self.global_step = int(recipe_state["step"])
            if recipe_state.get("config") is not None:
                self._resume_changes = compare_resume_config(
                    recipe_state["config"], OmegaConf.to_container(cfg, resolve=True)
                )

        self._tokenizer = config.instantiate(cfg.tokenizer)
        self._model_kw = _model_kwargs(cfg.model)
        model = self._build_model()
        self._check_quantized_shapes(model)
        model_sd, self._start_dir = self._load_start_weights(resume_dir)
        self._model = self._setup_model(model, model_sd, recipe_state)
        self._check_model_against_data()

        self._loss_fn: LongShortLoss = config.instantiate(cfg.loss)
        if not isinstance(self._loss_fn, LongShortLoss):
            raise ValueError(f"loss: expected torchtune_longshort.loss.LongShortLoss, got {type(self._loss_fn).__name__}")
        self._loss_fn.set_model_output(self._model)
        utils.log_rank_zero(
            log, f"Loss path: {self._loss_fn.output_path} (output module {type(self._loss_fn.linear_projection).__name__})"
        )

        self._optimizer = self._setup_optimizer()
        self._lr_scheduler = self._setup_lr_scheduler()
        if recipe_state is not None:
            self._restore_optimizer(recipe_state)

        self._batcher = self._setup_data(recipe_state)
        self._pos_sampler, self._pos_generator = self._setup_position_sampler(recipe_state)
        self._val_tokens = self._setup_validation()

        self._metric_logger = config.instantiate(cfg.metric_logger) if self._is_rank_zero else None
        if self._metric_logger is not None:
            self._metric_logger.log_config(cfg)
        self._jsonl = (
            JsonlMetricLogger(self.output_dir / "metrics.jsonl", resume_step=self.global_step, device=self._device)
            if self._is_rank_zero
            else None
        )
        if recipe_state is not None:
            torch.set_rng_state(recipe_state["torch_rng"])
            utils.log_rank_zero(log, f"Resumed from {resume_dir} at step {self.global_step}")

    def _setup_optimizer(self):
        return config.instantiate(self.cfg.optimizer, [p for p in self._model.parameters() if p.requires_grad])

    def _setup_lr_scheduler(self):
        if self.cfg.get("lr_scheduler") is None:
            return None
        return config.instantiate(
            self.cfg.lr_scheduler, self._optimizer, num_training_steps=self.cfg.max_steps, last_epoch=-1
        )

    def _restore_optimizer(self, recipe_state: Dict[str, Any]) -> None:
        """Optimizer and LR schedule from ``recipe_state.pt``, then the changes a resumed run means."""
        # After the scheduler is built: its constructor writes the step-0 lr into the param groups, which the
        # saved optimizer state (param groups included) must overwrite.
        if self._distributed:
            training.load_from_full_optimizer_state_dict(
                self._model, self._optimizer, recipe_state["optimizer"], self._device
            )
        else:
            self._optimizer.load_state_dict(recipe_state["optimizer"])
        if self._lr_scheduler is not None:
            self._lr_scheduler.load_state_dict(recipe_state["lr_scheduler"])
        self._apply_resume_changes()

    def _apply_resume_changes(self) -> None:
        """Apply (and log) what a resumed run changes on purpose; the optimizer's saved param groups would
        otherwise keep the old values (an lr lowered after a NaN would silently not apply)."""
        for key, old, new in self._resume_changes:
            if key.startswith("optimizer.") and key != "optimizer._component_":
                name = key.split(".", 1)[1]
                for group in self._optimizer.param_groups:
                    if name in group:
                        group[name] = new
                        if name == "lr":
                            group["initial_lr"] = new
                if name == "lr" and self._lr_scheduler is not None:
                    self._lr_scheduler.base_lrs = [new for _ in self._lr_scheduler.base_lrs]
            utils.log_rank_zero(log, f"resume: {key} changed {old!r} -> {new!r} (applied)")

    def _barrier(self) -> None:
        if self._distributed:
            torch.distributed.barrier()

    def _load_start_weights(self, resume_dir: Optional[Path]):
        """The torchtune state dict to start from and the checkpoint folder it came from.

        From scratch (``checkpointer.checkpoint_dir: null``): the model is built with the config's explicit
        dimensions and ``seed``, written as ``step_0`` (a checkpoint folder like every ``step_k``), and loaded
        back, so every later path is the same. Reading goes through torchtune's checkpointer (the config's
        ``checkpointer``), writing through ``models.hf_checkpoint``.
        """
        cfg = self.cfg
        start_dir = cfg.checkpointer.get("checkpoint_dir")
        if start_dir is None:
            if resume_dir is None and self._is_rank_zero:
                with training.set_default_dtype(torch.float32):
                    torch.manual_seed(self.seed)
                    scratch = config.instantiate(cfg.model)
                write_hf_checkpoint(
                    self.ckpts.staging_root / "step_0",
                    scratch.state_dict(),
                    hf_config_from_llama_kwargs(self._model_kw),
                    rope_spec=getattr(scratch, "rope_scaling", None),
                    tokenizer=self._tokenizer_source(),
                )
                self.ckpts.commit(self.ckpts.staging_root / "step_0", 0)
                del scratch
            self._barrier()
            start_dir = str(self.ckpts.path(0))
        # The base config.json every step_k is written with (its RoPE entries replaced by the model's).
        self._base_hf_config = read_hf_config(start_dir)
        # Full fine-tuning resumes from the saved weights; LoRA from the base weights + saved adapter.
        load_dir = str(resume_dir) if (resume_dir is not None and not self._is_lora) else start_dir
        sd = self._make_checkpointer(load_dir).load_checkpoint()[training.MODEL_KEY]
        return sd, Path(start_dir)

    def _tokenizer_source(self) -> Optional[str]:
        """Where the tokenizer files that go into every checkpoint come from: the start checkpoint folder when it
        holds transformers' ``tokenizer.json`` (a hub folder: Llama-3's ``tokenizer.path`` is a tiktoken file under
        ``original/`` that transformers cannot read), else ``tokenizer.path``."""
        start = self.cfg.checkpointer.get("checkpoint_dir")
        if start is not None and (Path(start) / "tokenizer.json").is_file():
            return str(start)
        path = self.cfg.tokenizer.get("path")
        return str(path) if path is not None else None

    def _make_checkpointer(self, checkpoint_dir: str):
        ck = OmegaConf.to_container(self.cfg.checkpointer, resolve=True)
        ck["checkpoint_dir"] = checkpoint_dir
        same_dir = Path(checkpoint_dir) == Path(self.cfg.checkpointer.get("checkpoint_dir") or "/nonexistent")
        if not (same_dir and ck.get("checkpoint_files")):
            ck["checkpoint_files"] = weight_files(checkpoint_dir)
        # torchtune's checkpointer only reads here; it insists on an output folder, which stays empty.
        ck["output_dir"] = str(self.ckpts.staging_root)
        ck.setdefault("model_type", "LLAMA2")
        ck.pop("should_load_recipe_state", None)
        return config.instantiate(OmegaConf.create(ck))

    def _build_model(self) -> nn.Module:
        """Instantiate ``cfg.model`` (on the meta device when sharding follows) and find its LoRA settings."""
        init_device = torch.device("meta") if self._distributed else self._device
        with training.set_default_dtype(self._dtype), init_device:
            model = config.instantiate(self.cfg.model)
        self.rope_spec = getattr(model, "rope_scaling", None)
        from torchtune.modules.peft import LoRALinear

        lora = [m for m in model.modules() if isinstance(m, LoRALinear)]
        self._is_lora = bool(lora)
        if lora:
            self._lora_rank, self._lora_alpha = lora[0].rank, lora[0].alpha
        return model

    def _check_quantized_shapes(self, model: nn.Module) -> None:
        """NF4 (QLoRA) quantizes blocks of 64 values with scalers in blocks of 256, and FSDP2 splits each weight along
        dim 0 across ranks: every quantized weight needs numel divisible by 64 * 256 * world_size. Refuse other
        shapes before any weight is loaded, with the rule."""
        block = 64 * 256
        bad = []
        for name, p in model.named_parameters():
            if type(p).__name__ == "NF4Tensor" or type(getattr(p, "data", None)).__name__ == "NF4Tensor":
                if p.numel() % (block * self.world_size) or p.shape[0] % self.world_size:
                    bad.append(f"{name} {tuple(p.shape)}")
        if bad:
            raise ValueError(
                f"QLoRA (NF4) cannot quantize/shard {len(bad)} weight(s) at world_size={self.world_size}: "
                f"{bad[:3]}... Each quantized weight needs numel divisible by 64 * 256 * world_size = "
                f"{block * self.world_size} (and dim 0 by world_size); choose model dimensions that satisfy it "
                "(e.g. embed_dim 256, intermediate_dim 768 for 2 processes) or quantize_base=False"
            )

    def _setup_model(
        self, model: nn.Module, model_sd: Dict[str, torch.Tensor], recipe_state: Optional[Dict[str, Any]]
    ) -> nn.Module:
        cfg = self.cfg

        if self._is_lora:
            adapter = get_adapter_params(model)
            trainable = set(adapter)
            if cfg.get("train_embeddings_and_norms", False):
                # LongQLoRA trains the embeddings and norms besides the adapters.
                trainable |= {n for n, _ in model.named_parameters() if "tok_embeddings" in n or "norm" in n}
            set_trainable_params(model, trainable)
            self._trainable_names = sorted(trainable)

        if cfg.get("enable_activation_checkpointing", False):
            training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
        if cfg.get("compile", False):
            training.compile_model(model, verbose=self._is_rank_zero)

        saved_trainable = dict(recipe_state.get("trainable") or {}) if (recipe_state and self._is_lora) else {}
        learned_rope = load_rope_parameters(self._resume_dir) if self._resume_dir is not None else {}
        if learned_rope:
            # Learned RoPE parameters (CLEX) are shared by all layers; restore them under every layer's name.
            for k in [n for n in model.state_dict() if ".pos_embeddings." in n]:
                sub = k.split(".pos_embeddings.", 1)[1]
                if sub in learned_rope:
                    saved_trainable[k] = learned_rope[sub]
        if self._distributed:
            training.shard_model(
                model=model,
                # The loss applies model.output itself, outside the decoder's forward; as its own FSDP unit its
                # forward hooks gather the weight whenever the loss calls it (and reshard it after).
                shard_conditions=[
                    lambda n, m: isinstance(m, modules.TransformerSelfAttentionLayer) or n in ("output", "decoder.output")
                ],
                cpu_offload=False,
                reshard_after_forward=cfg.get("fsdp_reshard_after_forward", True),
            )
            from torchtune.modules.peft import DoRALinear, LoRALinear

            with training.set_default_dtype(self._dtype), self._device:
                for m in model.modules():
                    if isinstance(m, (LoRALinear, DoRALinear)) and not saved_trainable:
                        # A new adapter is in no checkpoint: materialize it (LoRA's B = 0, so step 1's loss is the
                        # base model's, as in one process) -- torchtune's lora_finetune_distributed does the same.
                        m.to_empty(device=self._device)
                        m.initialize_parameters()
                    if hasattr(m, "rope_init"):
                        m.rope_init()
            full = {**model_sd, **saved_trainable}
            training.load_from_full_model_state_dict(model, full, self._device, strict=False)
            training.validate_no_params_on_meta_device(model)
        else:
            missing, unexpected = model.load_state_dict(model_sd, strict=False)
            missing = [k for k in missing if ".pos_embeddings." not in k and "lora_" not in k and "magnitude" not in k]
            if missing or unexpected:
                raise ValueError(
                    f"checkpoint {str(self._start_dir)!r} does not fit model {cfg.model._component_}: "
                    f"missing={missing[:5]} unexpected={unexpected[:5]}"
                )
            if saved_trainable:
                model.load_state_dict(saved_trainable, strict=False)
            model.to(self._device)
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        utils.log_rank_zero(log, f"Model ready: {n_train:,} trainable parameters, dtype {self._dtype}")
        return model

    def _check_model_against_data(self) -> None:
        """Errors that must come before any step: tokenizer/model vocabulary, L against the RoPE range."""
        cfg = self.cfg
        emb = self._model.tok_embeddings
        model_vocab = emb.num_embeddings
        tok_vocab = getattr(self._tokenizer, "vocab_size", None)
        if tok_vocab is not None and tok_vocab > model_vocab:
            raise ValueError(
                f"tokenizer vocabulary ({tok_vocab} ids, {cfg.tokenizer.get('path')}) does not fit the model's "
                f"embedding table ({model_vocab} rows): tokenizer and model do not match"
            )
        self.model_vocab = model_vocab
        L = cfg.seq_len
        max_len = getattr(self._model, "max_seq_len", None)
        if not isinstance(L, int) or L < 4:
            raise ValueError(f"seq_len={L!r} must be an int >= 4")
        if max_len is not None and L > max_len:
            method = (self.rope_spec or {}).get("method", "default (no RoPE scaling)")
            raise ValueError(
                f"seq_len={L} is above the range of the model's RoPE ({method}): max_seq_len={max_len}. "
                "Lower seq_len or scale RoPE to a longer max_seq_len (model: rope_scaled ... max_seq_len)"
            )
        val = cfg.get("validation")
        if val is not None and max_len is not None and val.seq_len > max_len:
            raise ValueError(f"validation.seq_len={val.seq_len} is above the model's max_seq_len={max_len}")

    def _tokenize(self, text: str):
        return self._tokenizer.encode(text, add_bos=True, add_eos=True)

    def _setup_data(self, recipe_state) -> DualWindowBatcher:
        cfg = self.cfg
        documents = self._setup_documents()
        stream = PackedTokenStream(documents, tokenize=self._tokenize, vocab_size=self.model_vocab)
        batcher = DualWindowBatcher(
            stream,
            L=cfg.seq_len,
            e_range=list(cfg.get("e_range", [1, "L/2"])),
            batch_size=self.micro_batch,
            seed=cfg.get("data_seed", self.seed),
            rank=self.rank,
            world_size=self.world_size,
            ignore_index=self._loss_fn.ignore_index,
        )
        if recipe_state is not None:
            batcher.load_state_dict(recipe_state["data"])
        else:
            # Before step 1: a corpus shorter than one sample would be trained on repeats, one of empty documents
            # on BOS/EOS alone; then read one sample so a tokenizer/model mismatch fails here too.
            self._check_corpus_length(documents, cfg.seq_len + batcher.e_hi + 1)
            probe = PackedTokenStream(documents, tokenize=self._tokenize, vocab_size=self.model_vocab)
            probe.take(cfg.seq_len + batcher.e_hi)
        return batcher

    def _setup_documents(self):
        """``dataset``: a documents source of ``torchtune_longshort.data.corpus``, or a torchtune dataset builder
        (its first parameter ``tokenizer``, e.g. ``torchtune.datasets.text_completion_dataset``), built with the
        recipe's tokenizer and read sample by sample."""
        from torchtune.config._utils import _get_component_from_path

        from torchtune_longshort.data.torchtune_datasets import takes_tokenizer, torchtune_documents

        node = self.cfg.dataset
        if takes_tokenizer(_get_component_from_path(node._component_)):
            return torchtune_documents(config.instantiate(node, self._tokenizer), name=node._component_)
        return config.instantiate(node)

    def _check_corpus_length(self, documents, need: int) -> None:
        """One pass over the documents must hold ``need`` = L + e_max + 1 text tokens (BOS/EOS not counted)."""
        got = 0
        for doc in documents():
            if isinstance(doc, str):
                got += len(self._tokenizer.encode(doc, add_bos=False, add_eos=False))
            else:  # token ids of a torchtune dataset sample, BOS/EOS included
                specials = {self._tokenizer.bos_id, self._tokenizer.eos_id}
                got += sum(1 for t in doc if t not in specials)
            if got >= need:
                return
        raise ValueError(
            f"dataset {documents!r} holds {got} text tokens in one pass, fewer than one sample of "
            f"seq_len + e_max + 1 = {need}: training would repeat it (or see only BOS/EOS). Use more data, a "
            "shorter seq_len or a smaller e_range"
        )

    def _setup_position_sampler(self, recipe_state):
        """Optional ``position_sampler`` (``torchtune_longshort.rope.POSITION_SAMPLERS``: random_pos, PoSE): each
        training window gets sampled position ids instead of 0..L-1; its generator is saved for exact resume."""
        node = self.cfg.get("position_sampler")
        if node is None:
            return None, None
        sampler = config.instantiate(node)
        if not hasattr(sampler, "sample"):
            raise ValueError(f"position_sampler: {node._component_} has no sample(batch_size, seq_len, generator)")
        max_len = getattr(self._model, "max_seq_len", None)
        bound = getattr(sampler, "max_position", None) or getattr(sampler, "target_len", None)
        if max_len is not None and bound is not None and bound > max_len:
            raise ValueError(
                f"position_sampler draws positions up to {bound}, above the model's max_seq_len={max_len}: scale "
                "RoPE to at least that length (model.max_seq_len)"
            )
        gen = torch.Generator().manual_seed(int(self.cfg.get("data_seed", self.seed)) + 7919 * (self.rank + 1))
        if recipe_state is not None and recipe_state.get("position_generator") is not None:
            gen.set_state(recipe_state["position_generator"])
        return sampler, gen

    def _setup_validation(self) -> Optional[torch.Tensor]:
        val = self.cfg.get("validation")
        if val is None:
            return None
        docs = config.instantiate(val.dataset)
        return fixed_length_sequences(docs, self._tokenize, val.seq_len, val.num_sequences, self.model_vocab)

    # ------------------------------------------------------------------ checkpoint
    def save_checkpoint(self) -> None:
        """Write ``step_<k>`` whole or not at all (see ``torchtune_longshort.training.checkpointing``)."""
        step = self.global_step
        if self._distributed:
            model_sd = training.gather_cpu_state_dict(self._model, self._is_rank_zero, device=self._device)
            opt_sd = training.get_full_optimizer_state_dict(
                self._model, self._optimizer, self._is_rank_zero, device=self._device
            )
        else:
            model_sd = {k: v.detach().cpu() for k, v in self._model.state_dict().items()}
            opt_sd = self._optimizer.state_dict()
        if self._is_rank_zero:
            self.ckpts.clean_staging()
            trainable = None
            if self._is_lora:
                trainable = {k: v.clone() for k, v in model_sd.items() if k in set(self._trainable_names)}
                model_sd = get_merged_lora_ckpt(model_sd, rank=self._lora_rank, alpha=self._lora_alpha)
            staged = self.ckpts.staging_root / f"step_{step}"
            write_hf_checkpoint(
                staged,
                model_sd,
                self._hf_config_for_save(),
                rope_spec=self.rope_spec,
                tokenizer=self._tokenizer_source(),
            )
            state = {
                "step": step,
                "optimizer": opt_sd,
                "lr_scheduler": self._lr_scheduler.state_dict() if self._lr_scheduler else None,
                "data": self._batcher.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "trainable": trainable,
                "position_generator": self._pos_generator.get_state() if self._pos_generator is not None else None,
                "config": OmegaConf.to_container(self.cfg, resolve=True),
            }
            atomic_torch_save(state, staged / RECIPE_STATE)
            if self.before_commit is not None:
                self.before_commit(step, staged)
            final = self.ckpts.commit(staged, step)
            log.info(f"Checkpoint for step {step} written to {final}")
        self._barrier()

    def _hf_config_for_save(self) -> Dict[str, Any]:
        """The start folder's config.json; for plain RoPE its length is the model's (RoPE specs set their own)."""
        hf_cfg = dict(self._base_hf_config)
        if not self.rope_spec:
            hf_cfg["max_position_embeddings"] = int(getattr(self._model, "max_seq_len", hf_cfg["max_position_embeddings"]))
        return hf_cfg

    # ------------------------------------------------------------------ train
    @torch.no_grad()
    def _validate(self) -> Dict[str, float]:
        """Plain next-token cross-entropy on the fixed-length validation sequences (one at a time)."""
        self._model.eval()
        total, count = 0.0, 0
        for row in self._val_tokens:
            tokens = row.to(self._device)
            with hidden_state_output(self._model) as decoder:
                hidden = self._model(tokens[None])[0]
            tok_lp, _ = project_target_logprobs(decoder.output, hidden[:-1], tokens[1:], self.model_vocab)
            total -= float(tok_lp.double().sum())
            count += tok_lp.shape[0]
        self._model.train()
        return {"val_ce": total / count, "val_ppl": math.exp(min(total / count, 50.0))}

    def train(self) -> None:
        cfg = self.cfg
        max_steps = cfg.max_steps
        save_every = cfg.get("save_every_n_steps", max_steps)
        log_every = cfg.get("log_every_n_steps", 1)
        val_every = (cfg.get("validation") or {}).get("every_n_steps", max_steps)
        clip = cfg.get("clip_grad_norm")
        self._model.train()
        if self._device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self._device)
        pbar = None
        if self._is_rank_zero:
            from tqdm import tqdm

            pbar = tqdm(total=max_steps, initial=self.global_step, desc="longshort", dynamic_ncols=True)
        t0 = time.perf_counter()
        tokens_since = 0
        # stop_after_step: end this process early (job time limits); the LR schedule still spans max_steps and
        # resume=True continues exactly where it stopped.
        stop_at = min(max_steps, cfg.get("stop_after_step") or max_steps)
        while self.global_step < stop_at:
            self._optimizer.zero_grad(set_to_none=True)
            sums = {"loss": 0.0, "ce": 0.0, "misalignment": 0.0, "e": 0.0}
            for _ in range(self.grad_accum):
                batch = self._batcher.next_batch()
                e = batch["e"]
                out = self._loss_step(batch)
                (out.loss / self.grad_accum).backward()
                sums["loss"] += out.loss.item() / self.grad_accum
                sums["ce"] += out.ce.item() / self.grad_accum
                sums["misalignment"] += out.misalignment.item() / self.grad_accum
                sums["e"] += e / self.grad_accum
                tokens_since += 2 * batch["tokens_a"].numel() * self.world_size  # both windows go through the model
            # Without clipping, max_norm=inf only measures the norm (every gradient is scaled by 1).
            grad_norm = torch.nn.utils.clip_grad_norm_(
                self._model.parameters(), max_norm=float(clip) if clip is not None else float("inf")
            )
            if hasattr(grad_norm, "full_tensor"):
                grad_norm = grad_norm.full_tensor()
            if not torch.isfinite(grad_norm).item():
                # Clipping an infinite norm scales every gradient to zero or NaN: the run would go on without
                # learning. Stop before the optimizer step; the last checkpoint stays the last good one.
                raise FloatingPointError(
                    f"non-finite gradient norm {grad_norm.item()} at step {self.global_step + 1} (rank "
                    f"{self.rank}), e={e}, data position {batch['data_position']}, loss {sums['loss']:.6g}; "
                    f"stopping before the optimizer step (last checkpoint: {self.ckpts.latest()})"
                )
            self._optimizer.step()
            if self._lr_scheduler is not None:
                self._lr_scheduler.step()
            self.global_step += 1

            if self._distributed:
                # Logged values are the global batch's mean (each rank holds its slice).
                t = torch.tensor([sums["loss"], sums["ce"], sums["misalignment"]], device=self._device)
                torch.distributed.all_reduce(t)
                t /= self.world_size
                sums["loss"], sums["ce"], sums["misalignment"] = t.tolist()

            if self.global_step % log_every == 0 or self.global_step == max_steps:
                dt = time.perf_counter() - t0
                metrics = {
                    **sums,
                    "lr": self._optimizer.param_groups[0]["lr"],
                    "tokens_per_second": tokens_since / dt if dt > 0 else 0.0,
                    "peak_memory_gib": peak_memory_gib(self._device),
                }
                metrics["grad_norm"] = float(grad_norm)
                if self._is_rank_zero:
                    self._metric_logger.log_dict(metrics, step=self.global_step)
                    self._jsonl.log(self.global_step, metrics)
                    pbar.set_postfix(loss=f"{sums['loss']:.4f}", mis=f"{sums['misalignment']:.3g}", e=int(sums["e"]))
                t0, tokens_since = time.perf_counter(), 0
            if pbar is not None:
                pbar.update(1)
            if self._val_tokens is not None and (self.global_step % val_every == 0 or self.global_step == max_steps):
                vm = self._validate()
                if self._is_rank_zero:
                    self._metric_logger.log_dict(vm, step=self.global_step)
                    self._jsonl.log(self.global_step, vm)
            stop_signal = self._signal_received()
            if self.global_step % save_every == 0 or self.global_step in (max_steps, stop_at) or stop_signal:
                self.save_checkpoint()
            if stop_signal:
                self.stopped_by = stop_signal
                utils.log_rank_zero(
                    log,
                    f"{signal.Signals(stop_signal).name} received: finished step {self.global_step}, saved "
                    f"{self.ckpts.path(self.global_step)}; continue with resume=True",
                )
                break
        if pbar is not None:
            pbar.close()

    def _loss_step(self, batch: Dict[str, Any]):
        """Forward both windows of a dual-window batch and score them: ``LongShortLoss``'s output."""
        e = batch["e"]
        ta, tb = batch["tokens_a"].to(self._device), batch["tokens_b"].to(self._device)
        la, lb = batch["labels_a"].to(self._device), batch["labels_b"].to(self._device)
        # one forward over both windows stacked on the batch dimension (as many tokens as two calls, one kernel
        # launch per layer instead of two)
        tokens = torch.cat([ta, tb])
        input_pos = None
        if self._pos_sampler is not None:
            input_pos = self._pos_sampler.sample(tokens.shape[0], self.cfg.seq_len, generator=self._pos_generator)
            input_pos = input_pos.to(self._device)
        out_a, out_b = _split_windows(self._model(tokens, input_pos=input_pos), ta.shape[0])
        out = self._loss_fn(out_a, out_b, la, lb, e)
        if not torch.isfinite(out.loss.detach()).item():
            raise FloatingPointError(
                f"non-finite loss {out.loss.item()} at step {self.global_step + 1} (rank {self.rank}), "
                f"e={e}, data position {batch['data_position']} (ce={out.ce.item()}, "
                f"misalignment={out.misalignment.item()}); stopping before the optimizer step"
            )
        return out

    def _install_signal_handlers(self) -> None:
        """SIGTERM / SIGINT (a job scheduler's time limit, Ctrl-C) end the run after the current step, with a save."""
        self._signal = 0
        self.stopped_by = 0

        def handler(signum, frame):
            if self._signal:  # a second signal: stop now, as the default handler would
                raise KeyboardInterrupt
            self._signal = signum

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, handler)

    def _signal_received(self) -> int:
        """The signal any rank received (all ranks stop at the same step)."""
        flag = self._signal
        if self._distributed:
            t = torch.tensor([flag], device=self._device)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            flag = int(t.item())
        return flag

    def release_output_dir(self) -> None:
        """Give up the output folder's lock (also after a failure, so the next run need not wait for a dead PID)."""
        if getattr(self, "_lock", None) is not None:
            self._lock.release()

    def cleanup(self) -> None:
        self.release_output_dir()
        if self._is_rank_zero:
            self._metric_logger.close()
            latest = self.ckpts.latest()
            print(f"[longshort] checkpoint: {latest}")
            print(f"[longshort] metrics:    {self.output_dir / 'metrics.jsonl'} (and {self.cfg.metric_logger.get('log_dir', 'the metric logger')})")
        if self._distributed:
            torch.distributed.destroy_process_group()


def _split_windows(out, bsz: int):
    """Split the model output of ``cat([tokens_a, tokens_b])`` (a tensor or a list of chunks) into A and B."""
    if isinstance(out, (list, tuple)):
        return [c[:bsz] for c in out], [c[bsz:] for c in out]
    return out[:bsz], out[bsz:]


@config.parse
def recipe_main(cfg: DictConfig) -> None:
    """Entry point for ``tune run``."""
    from torchtune_longshort._quiet import quiet_upstream

    quiet_upstream()
    recipe = LongShortFinetuneRecipe(cfg)
    recipe.setup()
    recipe._install_signal_handlers()
    try:
        recipe.train()
    except BaseException:
        recipe.release_output_dir()
        raise
    recipe.cleanup()
    if recipe.stopped_by:
        sys.exit(128 + recipe.stopped_by)  # the shell's convention for "ended by a signal"


if __name__ == "__main__":
    sys.exit(recipe_main())
