"""Checks of a long-short recipe config that run before anything exists: no output folder, process group,
tokenizer or model yet. Each failure names the field, the value and what would be accepted.

The schema is the set of top-level keys the recipe reads (:data:`RECIPE_KEYS`); an unknown key is refused with the
nearest known one, since OmegaConf would otherwise keep a typo such as ``max_step=2`` silently and train the
default step count. torchtune's ``~key`` removal on the command line still works: a removed key is simply absent.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import DictConfig

from torchtune_longshort.loss.longshort_loss import DEFAULT_ALPHA
from torchtune_longshort.windows import DEFAULT_E_RANGE, resolve_e_range

# Top-level keys the recipe reads; ``checkpoint_dir`` is the configs' interpolation variable.
RECIPE_KEYS = {
    "output_dir": "folder for step_<k> checkpoints, metrics.jsonl and logs",
    "overwrite_output_dir": "replace a folder an earlier run of this recipe made",
    "resume": "continue from the newest resumable step_<k>",
    "seed": "model init and e-sampler seed",
    "data_seed": "data order seed (default: seed)",
    "tokenizer": "torchtune tokenizer component",
    "model": "model builder component",
    "checkpointer": "torchtune checkpointer (reads the start weights)",
    "checkpoint_dir": "start checkpoint folder (interpolated into checkpointer/tokenizer)",
    "dataset": "documents source",
    "validation": "optional fixed-length validation set",
    "seq_len": "L, the window length",
    "e_range": "[lo, hi] range of the shift e, ints or expressions in L",
    "window_bos": "pre-training: BOS over the first token of each window (alpha must be 0)",
    "batch_size": "global sequences per optimizer step",
    "gradient_accumulation_steps": "micro-batches per optimizer step",
    "max_steps": "optimizer steps",
    "stop_after_step": "end this process early (resume=True continues)",
    "equal_compute_overhead": "Appendix F: alpha > 0 runs get floor(max_steps / ratio) steps",
    "loss": "LongShortLoss component",
    "optimizer": "optimizer component",
    "lr_scheduler": "optional LR scheduler component",
    "clip_grad_norm": "max gradient norm (null: no clipping)",
    "clip_rope_separately": "clip the RoPE's trainable parameters (CLEX's ODE) as their own group (default false)",
    "device": "cpu | cuda | cuda:N",
    "cpu_keep_freed_blocks": "CPU: glibc keeps large freed blocks for reuse (default true; training.cpu_allocator)",
    "dtype": "fp32 | bf16 | fp16",
    "compile": "torch.compile the model",
    "enable_activation_checkpointing": "checkpoint each transformer layer",
    "train_embeddings_and_norms": "LoRA: also train embeddings and norms (LongQLoRA)",
    "fsdp_reshard_after_forward": "FSDP2 reshard_after_forward",
    "position_sampler": "optional position-id sampler component (PoSE, random_pos)",
    "save_every_n_steps": "checkpoint period in steps",
    "log_every_n_steps": "logging period in steps",
    "metric_logger": "torchtune metric logger component",
}
REQUIRED = ("output_dir", "tokenizer", "model", "checkpointer", "dataset", "seq_len", "batch_size", "max_steps",
            "loss", "optimizer", "metric_logger")
_DTYPES = ("fp32", "bf16", "fp16")


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is not accepted: expected an integer >= {minimum}")
    return value


def _positive_number(name: str, value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not accepted: expected a positive number or null") from None
    if isinstance(value, bool) or not math.isfinite(out) or out <= 0:
        raise ValueError(f"{name}={value!r} is not accepted: expected a positive finite number or null")
    return out


def check_recipe_config(cfg: DictConfig, world_size: int = 1, cuda_available: Optional[bool] = None) -> Dict[str, Any]:
    """Check every scalar of a recipe config; return the derived values (``micro_batch``, ``e_lo``, ``e_hi``, and
    ``alpha``: the loss weight the run trains with, ``loss.alpha`` or the loss's own default when it is absent).

    Raises ``ValueError`` (``KeyError`` for unknown or missing keys) naming the field, before any side effect.
    """
    unknown = [k for k in cfg.keys() if k not in RECIPE_KEYS]
    if unknown:
        hints = []
        for k in unknown:
            near = difflib.get_close_matches(str(k), RECIPE_KEYS, n=1, cutoff=0.6)
            hints.append(f"{k!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        raise KeyError(
            f"unknown top-level config key(s): {', '.join(hints)}. The recipe reads: {', '.join(sorted(RECIPE_KEYS))}"
        )
    missing = [k for k in REQUIRED if cfg.get(k) is None]
    if missing:
        raise KeyError(f"config is missing required key(s) {missing}")

    out: Dict[str, Any] = {}
    bs = _positive_int("batch_size", cfg.batch_size)
    ga = _positive_int("gradient_accumulation_steps", cfg.get("gradient_accumulation_steps", 1))
    if bs % (world_size * ga) != 0:
        raise ValueError(
            f"batch_size={bs} is not divisible by world_size ({world_size}) x gradient_accumulation_steps "
            f"({ga}) = {world_size * ga}; accepted: a multiple of {world_size * ga}"
        )
    out["micro_batch"] = bs // (world_size * ga)
    _positive_int("max_steps", cfg.max_steps)
    L = _positive_int("seq_len", cfg.seq_len, minimum=4)
    for key in ("save_every_n_steps", "log_every_n_steps", "stop_after_step"):
        if cfg.get(key) is not None:
            _positive_int(key, cfg.get(key))
    if cfg.get("clip_grad_norm") is not None:
        _positive_number("clip_grad_norm", cfg.clip_grad_norm)
    if cfg.get("equal_compute_overhead") is not None:
        _positive_number("equal_compute_overhead", cfg.equal_compute_overhead)

    e_range = cfg.get("e_range", DEFAULT_E_RANGE)
    try:
        out["e_lo"], out["e_hi"] = resolve_e_range(list(e_range) if not isinstance(e_range, str) else e_range, L)
    except (ValueError, TypeError, ZeroDivisionError) as e:
        raise ValueError(f"e_range={e_range!r}: {e}") from None

    if cfg.dataset.get("packed"):
        raise ValueError(
            "dataset.packed=True is not accepted: pass packed=False (the dual-window stream packs the documents "
            "itself, end to end, so that window B can reach e tokens past window A)"
        )
    val = cfg.get("validation")
    if val is not None:
        for key in ("seq_len", "num_sequences"):
            _positive_int(f"validation.{key}", val.get(key))
        if val.get("every_n_steps") is not None:
            _positive_int("validation.every_n_steps", val.every_n_steps)
        if val.get("dataset") is None:
            raise KeyError("validation.dataset is missing (or set validation: null)")

    dtype = cfg.get("dtype", "fp32")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not accepted: expected one of {_DTYPES}")
    device = str(cfg.get("device", "cpu"))
    if device.startswith("cuda"):
        if cuda_available is None:
            import torch

            cuda_available = torch.cuda.is_available()
        if not cuda_available:
            raise ValueError(f"device={device!r} but CUDA is not available on this machine: pass device=cpu")
    elif device not in ("cpu", "mps"):
        raise ValueError(f"device={device!r} is not accepted: expected cpu, cuda or cuda:N")
    alpha = cfg.loss.get("alpha", DEFAULT_ALPHA)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0 or not math.isfinite(alpha):
        raise ValueError(f"loss.alpha={alpha!r} is not accepted: expected a number >= 0")
    out["alpha"] = float(alpha)
    window_bos = cfg.get("window_bos", False)
    if not isinstance(window_bos, bool):
        raise ValueError(f"window_bos={window_bos!r} is not accepted: expected true or false")
    if not isinstance(cfg.get("clip_rope_separately", False), bool):
        raise ValueError(f"clip_rope_separately={cfg.get('clip_rope_separately')!r} is not accepted: expected true or "
                         "false")
    if window_bos and out["alpha"] != 0:
        raise ValueError(
            f"window_bos=True with loss.alpha={alpha}: BOS written over each window's "
            "first token makes windows A and B differ in context, which the alignment loss must not see; use it "
            "to pre-train (alpha 0) only"
        )
    return out


def check_model_against_data(cfg: DictConfig, model: Any, tokenizer: Any, rope_spec: Optional[Dict[str, Any]]) -> int:
    """Errors that must come before any step: tokenizer/model vocabulary, L (and the validation length) against the
    RoPE range of the built ``model``. Returns the model's vocabulary size."""
    emb = model.tok_embeddings
    model_vocab = emb.num_embeddings
    tok_vocab = getattr(tokenizer, "vocab_size", None)
    if tok_vocab is not None and tok_vocab > model_vocab:
        raise ValueError(
            f"tokenizer vocabulary ({tok_vocab} ids, {cfg.tokenizer.get('path')}) does not fit the model's "
            f"embedding table ({model_vocab} rows): tokenizer and model do not match"
        )
    L = cfg.seq_len
    max_len = getattr(model, "max_seq_len", None)
    if not isinstance(L, int) or L < 4:
        raise ValueError(f"seq_len={L!r} must be an int >= 4")
    if max_len is not None and L > max_len:
        method = (rope_spec or {}).get("method", "default (no RoPE scaling)")
        raise ValueError(
            f"seq_len={L} is above the range of the model's RoPE ({method}): max_seq_len={max_len}. "
            "Lower seq_len or scale RoPE to a longer max_seq_len (model: rope_scaled ... max_seq_len)"
        )
    val = cfg.get("validation")
    if val is not None and max_len is not None and val.seq_len > max_len:
        raise ValueError(f"validation.seq_len={val.seq_len} is above the model's max_seq_len={max_len}")
    return model_vocab


def check_start_checkpoint(cfg: DictConfig) -> None:
    """``checkpointer.checkpoint_dir`` is a complete checkpoint folder of a family in the table, and
    ``checkpointer.model_type`` (when given) converts that family; without one (training from scratch, not resuming)
    the model node gives the explicit dimensions a ``config.json`` needs."""
    from torchtune_longshort.models.families import check_torchtune_model_type
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
    from torchtune_longshort.models.hf_llama import hf_config_from_llama_kwargs
    from torchtune_longshort.training.model_setup import model_kwargs

    start = cfg.checkpointer.get("checkpoint_dir")
    if start is not None:
        if not Path(start).exists():
            raise FileNotFoundError(f"checkpointer.checkpoint_dir={start!r} does not exist")
        folder = CheckpointFolder.open(start)
        check_torchtune_model_type(folder.family, cfg.checkpointer.get("model_type"), "checkpointer.model_type")
    if start is None and not cfg.get("resume", False):
        hf_config_from_llama_kwargs(model_kwargs(cfg.model))  # explicit dimensions are required from scratch
