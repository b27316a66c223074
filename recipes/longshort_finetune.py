"""Long-short alignment fine-tuning (Du et al., ICML 2025) as a torchtune recipe.

    PYTHONPATH=. tune run recipes/longshort_finetune.py --config configs/tiny_stdlib.yaml [key=value ...]
    PYTHONPATH=. tune run --nproc_per_node 2 recipes/longshort_finetune.py --config configs/... [key=value ...]

(``PYTHONPATH=.``: torchtune's wheel installs its own top-level ``recipes`` package, which would shadow this folder;
see docs/recipe.md.) One file serves one process and ``torchrun`` (FSDP2 through torchtune's
``training.shard_model``; gloo on CPU, nccl on GPU).

Per optimizer step: ``gradient_accumulation_steps`` micro-batches, each a dual-window batch
(``torchtune_longshort.data.DualWindowBatcher``: one shift ``e`` per micro-batch, window A = first L tokens,
window B = last L tokens of an L+e sample) scored by ``LongShortLoss``: ``(ce_A + ce_B)/2 + alpha * SCE``.
``alpha = 0`` is cross-entropy on exactly the same tokens.

``batch_size`` is the *global* number of sequences per optimizer step (the paper's 64); each rank's micro-batch
is ``batch_size / (world_size * gradient_accumulation_steps)``.

Checkpoints: ``output_dir/step_<k>`` in Hugging Face format (torchtune's ``FullModelHFCheckpointer``) with the RoPE
scaling in config.json and ``recipe_state.pt`` (optimizer, LR schedule, data position, e-sampler RNG), written
under ``.staging`` and renamed into place. ``resume=True`` continues from the newest complete one and reproduces
the uninterrupted run's losses.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Dict, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchtune import config, modules, training, utils
from torchtune.modules.peft import get_adapter_params, get_merged_lora_ckpt, set_trainable_params

from torchtune_longshort.data.corpus import fixed_length_sequences
from torchtune_longshort.data.dual_window import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.models.hf_rope import split_rope_state_dict
from torchtune_longshort.training.checkpointing import (
    RECIPE_STATE,
    StepCheckpoints,
    atomic_torch_save,
    atomic_write_text,
    hf_config_from_llama_kwargs,
    prepare_output_dir,
    weight_files,
    write_hf_checkpoint,
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

    Config fields (see configs/tiny_stdlib.yaml for a complete, commented example): ``model``, ``tokenizer``,
    ``checkpointer`` (``checkpoint_dir: null`` trains from random weights with the model's explicit dimensions),
    ``dataset`` (a documents callable from ``torchtune_longshort.data.corpus``), ``seq_len`` (L), ``e_range``,
    ``batch_size`` (global), ``gradient_accumulation_steps``, ``max_steps``, ``loss``, ``optimizer``,
    ``lr_scheduler``, ``clip_grad_norm``, ``dtype``, ``device``, ``compile``, ``enable_activation_checkpointing``,
    ``train_embeddings_and_norms`` (LoRA), ``save_every_n_steps``, ``resume``, ``overwrite_output_dir``,
    ``metric_logger``, ``log_every_n_steps``, ``validation`` (optional), ``seed``.
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

    # ------------------------------------------------------------------ checks that need no model
    def _validate_static(self, world_size: int) -> None:
        cfg = self.cfg
        self.world_size = world_size
        bs, ga = cfg.batch_size, cfg.get("gradient_accumulation_steps", 1)
        if not isinstance(bs, int) or bs < 1:
            raise ValueError(f"batch_size={bs!r} must be an int >= 1 (global sequences per optimizer step)")
        if not isinstance(ga, int) or ga < 1:
            raise ValueError(f"gradient_accumulation_steps={ga!r} must be an int >= 1")
        if bs % (self.world_size * ga) != 0:
            raise ValueError(
                f"batch_size={bs} is not divisible by world_size ({self.world_size}) x gradient_accumulation_steps "
                f"({ga}) = {self.world_size * ga}; accepted: a multiple of {self.world_size * ga}"
            )
        self.micro_batch = bs // (self.world_size * ga)
        self.grad_accum = ga
        if not isinstance(cfg.max_steps, int) or cfg.max_steps < 1:
            raise ValueError(f"max_steps={cfg.max_steps!r} must be an int >= 1")
        overhead = cfg.get("equal_compute_overhead")
        if overhead is not None and float(cfg.loss.get("alpha", 0.0)) > 0:
            # Appendix F: the regularized run gets the baseline's compute, not its step count.
            from torchtune_longshort.training.equal_compute import equal_compute_steps

            steps = equal_compute_steps(cfg.max_steps, overhead)
            log.info(f"equal_compute_overhead={overhead}: max_steps {cfg.max_steps} -> {steps} for alpha > 0")
            cfg.max_steps = steps
        start = cfg.checkpointer.get("checkpoint_dir")
        if start is not None and not Path(start).is_dir():
            raise FileNotFoundError(f"checkpointer.checkpoint_dir={start!r} does not exist or is not a directory")
        if start is None and not cfg.get("resume", False):
            hf_config_from_llama_kwargs(_model_kwargs(cfg.model))  # explicit dimensions are required from scratch

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        cfg = self.cfg
        resume = bool(cfg.get("resume", False))
        if self._is_rank_zero:
            prepare_output_dir(self.output_dir, resume=resume, overwrite=bool(cfg.get("overwrite_output_dir", False)))
        self._barrier()
        self.ckpts = StepCheckpoints(self.output_dir)
        resume_dir = self.ckpts.latest() if resume else None
        recipe_state = torch.load(resume_dir / RECIPE_STATE, weights_only=False) if resume_dir else None
        if recipe_state is not None:
            self.global_step = int(recipe_state["step"])

        self._tokenizer = config.instantiate(cfg.tokenizer)
        self._model_kw = _model_kwargs(cfg.model)
        model = self._build_model()
        model_sd, self._start_dir = self._load_start_weights(resume_dir)
        self._model = self._setup_model(model, model_sd, recipe_state)
        self._check_model_against_data()

        self._loss_fn: LongShortLoss = config.instantiate(cfg.loss)
        if not isinstance(self._loss_fn, LongShortLoss):
            raise ValueError(f"loss: expected torchtune_longshort.loss.LongShortLoss, got {type(self._loss_fn).__name__}")
        self._loss_fn.set_model_output(self._model)
        utils.log_rank_zero(log, f"Loss path: {self._loss_fn.output_path} (output module {type(self._loss_fn.linear_projection).__name__})")

        self._optimizer = config.instantiate(cfg.optimizer, [p for p in self._model.parameters() if p.requires_grad])
        self._lr_scheduler = None
        if cfg.get("lr_scheduler") is not None:
            self._lr_scheduler = config.instantiate(
                cfg.lr_scheduler, self._optimizer, num_training_steps=cfg.max_steps, last_epoch=-1
            )
        if recipe_state is not None:
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

        self._batcher = self._setup_data(recipe_state)
        self._val_tokens = self._setup_validation()

        self._metric_logger = config.instantiate(cfg.metric_logger) if self._is_rank_zero else None
        if self._metric_logger is not None:
            self._metric_logger.log_config(cfg)
        self._jsonl = (
            JsonlMetricLogger(self.output_dir / "metrics.jsonl", resume_step=self.global_step)
            if self._is_rank_zero
            else None
        )
        if recipe_state is not None:
            torch.set_rng_state(recipe_state["torch_rng"])
            utils.log_rank_zero(log, f"Resumed from {resume_dir} at step {self.global_step}")

    def _barrier(self) -> None:
        if self._distributed:
            torch.distributed.barrier()

    def _load_start_weights(self, resume_dir: Optional[Path]):
        """The torchtune state dict to start from and the HF folder the checkpointer converts with.

        From scratch (``checkpointer.checkpoint_dir: null``): the model is built with the config's explicit
        dimensions and ``seed``, written as ``step_0`` (HF format), and loaded back, so every later path is the same.
        """
        cfg = self.cfg
        ck = cfg.checkpointer
        start_dir = ck.get("checkpoint_dir")
        if start_dir is None:
            if resume_dir is None and self._is_rank_zero:
                with training.set_default_dtype(torch.float32):
                    torch.manual_seed(self.seed)
                    scratch = config.instantiate(cfg.model)
                hf_cfg = hf_config_from_llama_kwargs(self._model_kw)
                write_hf_checkpoint(self.ckpts.staging_root / "step_0", scratch.state_dict(), hf_cfg)
                self.ckpts.commit(self.ckpts.staging_root / "step_0", 0)
                del scratch
            self._barrier()
            start_dir = str(self.ckpts.path(0))
        elif not Path(start_dir).is_dir():
            raise FileNotFoundError(f"checkpointer.checkpoint_dir={start_dir!r} does not exist or is not a directory")
        # Full fine-tuning resumes from the saved weights; LoRA from the base weights + saved adapter.
        load_dir = str(resume_dir) if (resume_dir is not None and not self._is_lora) else start_dir
        self._checkpointer = self._make_checkpointer(load_dir)
        sd = self._checkpointer.load_checkpoint()[training.MODEL_KEY]
        # The save-side checkpointer converts with the start folder's config.json and writes into .staging.
        self._save_checkpointer = self._checkpointer
        return sd, Path(start_dir)

    def _make_checkpointer(self, checkpoint_dir: str):
        ck = OmegaConf.to_container(self.cfg.checkpointer, resolve=True)
        ck["checkpoint_dir"] = checkpoint_dir
        same_dir = Path(checkpoint_dir) == Path(self.cfg.checkpointer.get("checkpoint_dir") or "/nonexistent")
        if not (same_dir and ck.get("checkpoint_files")):
            ck["checkpoint_files"] = weight_files(checkpoint_dir)
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
        if recipe_state and recipe_state.get("rope"):
            # Learnable RoPE parameters (CLEX) are shared by all layers; restore them under every layer's name.
            for k in [n for n in model.state_dict() if ".pos_embeddings." in n]:
                sub = k.split(".pos_embeddings.", 1)[1]
                if sub in recipe_state["rope"]:
                    saved_trainable[k] = recipe_state["rope"][sub]
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
            with training.set_default_dtype(self._dtype), self._device:
                for m in model.modules():
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
        documents = config.instantiate(cfg.dataset)
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
            # Read one sample now so a bad corpus or a tokenizer/model mismatch fails before step 1.
            probe = PackedTokenStream(documents, tokenize=self._tokenize, vocab_size=self.model_vocab)
            probe.take(cfg.seq_len + batcher.e_hi)
        return batcher

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
            model_sd, rope_sd = split_rope_state_dict(model_sd)  # e.g. CLEX's learnable ODE; not HF weights
            self._save_checkpointer.save_checkpoint({training.MODEL_KEY: model_sd}, epoch=step)
            staged = self.ckpts.staging_root / f"epoch_{step}"
            self._write_config_json(staged)
            state = {
                "step": step,
                "optimizer": opt_sd,
                "lr_scheduler": self._lr_scheduler.state_dict() if self._lr_scheduler else None,
                "data": self._batcher.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "trainable": trainable,
                "rope": rope_sd,
                "config": OmegaConf.to_container(self.cfg, resolve=True),
            }
            atomic_torch_save(state, staged / RECIPE_STATE)
            pause = float(os.environ.get("LONGSHORT_TEST_PAUSE_BEFORE_COMMIT_S", "0"))
            if pause and int(os.environ.get("LONGSHORT_TEST_PAUSE_AT_STEP", step)) == step:  # test hook only: widens the window in which the kill test sends SIGKILL
                time.sleep(pause)
            final = self.ckpts.commit(staged, step)
            log.info(f"Checkpoint for step {step} written to {final}")
        self._barrier()

    def _write_config_json(self, folder: Path) -> None:
        path = folder / "config.json"
        hf_cfg = json.loads(path.read_text())
        if self.rope_spec:
            from torchtune_longshort.models import update_hf_config

            hf_cfg = update_hf_config(hf_cfg, self.rope_spec)
        hf_cfg["max_position_embeddings"] = int(getattr(self._model, "max_seq_len", hf_cfg.get("max_position_embeddings")))
        atomic_write_text(path, json.dumps(hf_cfg, indent=2))

    # ------------------------------------------------------------------ train
    @torch.no_grad()
    def _validate(self) -> Dict[str, float]:
        """Plain next-token cross-entropy on the fixed-length validation sequences (one at a time)."""
        self._model.eval()
        total, count = 0.0, 0
        proj = self._loss_fn.linear_projection
        for row in self._val_tokens:
            tokens = row[None].to(self._device)
            h = self._model(tokens)
            for lo in range(0, tokens.shape[1] - 1, 1024):
                hi = min(tokens.shape[1] - 1, lo + 1024)
                logits = proj(h[:, lo:hi]).float()
                total += torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), tokens[:, lo + 1 : hi + 1].reshape(-1), reduction="sum"
                ).item()
                count += hi - lo
        self._model.train()
        return {"val_ce": total / count, "val_ppl": math.exp(min(total / count, 50.0))}

    def train(self) -> None:
        cfg = self.cfg
        max_steps = cfg.max_steps
        save_every = cfg.get("save_every_n_steps", max_steps)
        log_every = cfg.get("log_every_n_steps", 1)
        val_every = (cfg.get("validation") or {}).get("every_n_steps", max_steps)
        clip = cfg.get("clip_grad_norm")
        L = cfg.seq_len
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
                ta, tb = batch["tokens_a"].to(self._device), batch["tokens_b"].to(self._device)
                la, lb = batch["labels_a"].to(self._device), batch["labels_b"].to(self._device)
                # one forward over both windows stacked on the batch dimension (as many tokens as two calls,
                # one kernel launch per layer instead of two)
                out_a, out_b = _split_windows(self._model(torch.cat([ta, tb])), ta.shape[0])
                out = self._loss_fn(out_a, out_b, la, lb, e)
                loss = out.loss
                if not torch.isfinite(loss.detach()).item():
                    raise FloatingPointError(
                        f"non-finite loss {loss.item()} at step {self.global_step + 1} (rank {self.rank}), "
                        f"e={e}, data position {batch['data_position']} (ce={out.ce.item()}, "
                        f"misalignment={out.misalignment.item()}); stopping before the optimizer step"
                    )
                (loss / self.grad_accum).backward()
                sums["loss"] += loss.item() / self.grad_accum
                sums["ce"] += out.ce.item() / self.grad_accum
                sums["misalignment"] += out.misalignment.item() / self.grad_accum
                sums["e"] += e / self.grad_accum
                tokens_since += 2 * ta.numel() * self.world_size  # both windows go through the model
            if clip is not None:
                grad_norm = torch.nn.utils.clip_grad_norm_(self._model.parameters(), max_norm=float(clip))
                if hasattr(grad_norm, "full_tensor"):
                    grad_norm = grad_norm.full_tensor()
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
                if clip is not None:
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
            if self.global_step % save_every == 0 or self.global_step in (max_steps, stop_at):
                self.save_checkpoint()
        if pbar is not None:
            pbar.close()

    def cleanup(self) -> None:
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
    recipe = LongShortFinetuneRecipe(cfg)
    recipe.setup()
    recipe.train()
    recipe.cleanup()


if __name__ == "__main__":
    sys.exit(recipe_main())
