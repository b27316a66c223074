"""Writing a checkpoint folder (the format: :mod:`~torchtune_longshort.models.hf_checkpoint`).

Weights are converted by the folder's model family (:mod:`~torchtune_longshort.models.families`: torchtune's own
``convert_weights`` functions, the ones its ``FullModelHFCheckpointer`` uses), so a folder loads identically in
torchtune and in transformers; the source model's tokenizer files are copied unchanged
(:mod:`~torchtune_longshort.models.hf_tokenizer`).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import nn

from torchtune_longshort.models.families import family_of, recorded_family
from torchtune_longshort.models.hf_checkpoint import (
    CONFIG_FILE,
    FORMAT_KEY,
    FORMAT_VERSION,
    INDEX_FILE,
    CheckpointFolder,
    PathLike,
    read_hf_config,
)
from torchtune_longshort.models.hf_rope import (
    ROPE_SIDE_FILE,
    saved_hf_config,
    split_rope_state_dict,
    transformers_representable,
)
from torchtune_longshort.models.hf_tokenizer import copy_tokenizer
from torchtune_longshort.models.peft_adapter import is_adapter_key
from torchtune_longshort.models.tokenizer_formats import has_tokenizer
from torchtune_longshort.output_guard import plain_file_mode

logger = logging.getLogger(__name__)
MAX_SHARD_BYTES = 5 * 1024**3  # transformers' save_pretrained default
# the names of the weight shards :func:`_write_shards` writes (huggingface_hub's, one shard too)
SHARD_PATTERN = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")


def write_hf_checkpoint(
    out_dir: PathLike,
    tune_state_dict: Dict[str, torch.Tensor],
    hf_config: Dict[str, Any],
    *,
    rope_spec: Optional[Dict[str, Any]] = None,
    tokenizer: Optional[PathLike] = None,
    dtype: Optional[torch.dtype] = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
    shown_as: Optional[PathLike] = None,
) -> Path:
    """Write a torchtune state dict as a checkpoint folder (see the format module).

    Args:
        out_dir: the folder to fill (created).
        tune_state_dict: torchtune key names; learned RoPE parameters (``*.pos_embeddings.*``) go to the side file;
            adapter weights are refused (merge them first: torchtune's ``get_merged_lora_ckpt``).
        hf_config: the base config.json (the source checkpoint's, or ``hf_model.decoder_config``); its
            model family converts the weights.
        rope_spec: the model's RoPE scaling spec (``model.rope_scaling``); None for plain RoPE.
        tokenizer: a tokenizer folder or file to copy in (see :func:`copy_tokenizer`); required unless ``out_dir``
            already holds one.
        dtype: weight dtype to save (default: as in the state dict).
        max_shard_bytes: shard size limit.
        shown_as: the folder's name in messages, when it is written elsewhere first (a run's staging area).

    Returns:
        ``out_dir`` as a Path.
    """
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    family = family_of(hf_config, where=f"write_hf_checkpoint({str(out_dir)!r}) config")
    model_sd, rope_sd = split_rope_state_dict(tune_state_dict)
    # all checked, and the weights converted, before the folder is made: a refusal leaves nothing behind
    _check_arguments(out_dir, tokenizer, dtype, model_sd, hf_config)
    hf_sd = family.tune_to_hf(model_sd, hf_config)
    hf_sd = {k: _plain_tensor(v, dtype) for k, v in hf_sd.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_shards(out_dir, hf_sd, max_shard_bytes, save_file)
    if rope_sd:
        write_rope_side_file(out_dir, rope_sd)

    # a family of one's own is recorded by its path, which the process reading the folder imports
    config = recorded_family(saved_hf_config(hf_config, rope_spec, family.hf_rope_types), family)
    if rope_spec and not transformers_representable(rope_spec, family.hf_rope_types):
        logger.warning(
            "RoPE method %r is not representable in transformers' %s config: %s loads with torchtune_longshort "
            "(longshort-eval --model longshort) only; transformers refuses it (config.json rope_type says why)%s",
            rope_spec["method"],
            family.name,
            shown_as or out_dir,
            # a config class that checks its RoPE when built (Phi3Config) fails AutoTokenizer too, which builds it
            "" if family.hf_rope_types is None else
            ", and AutoTokenizer too, which reads config.json first: load the tokenizer by its class, "
            "e.g. PreTrainedTokenizerFast.from_pretrained(folder) (tokenizer_config.json's tokenizer_class)",
        )
    for key in family.unapplied_window_keys:  # the model written attends to every position (families.py)
        if config.get(key) is not None:
            config[key] = None
    config[FORMAT_KEY] = FORMAT_VERSION
    # the dtype the weights are stored in (the widest, for a LoRA run's float32 merged weights beside bf16 ones):
    # transformers and lm-eval's hf load a folder in it by default; a source config's older torch_dtype key was kept
    # (float16 from the hub over float32 shards: loaded in float16 without a word)
    name = str(dtype or _stored_dtype(hf_sd)).replace("torch.", "")
    config["torch_dtype"] = config["dtype"] = name
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    if tokenizer is not None:
        copy_tokenizer(tokenizer, out_dir)
    return out_dir


def _stored_dtype(hf_sd: Dict[str, torch.Tensor]) -> torch.dtype:
    """The widest floating dtype among the weights (the first tensor's dtype when none is floating)."""
    floating = [v.dtype for v in hf_sd.values() if v.is_floating_point()]
    return max(floating, key=lambda d: torch.finfo(d).bits) if floating else next(iter(hf_sd.values())).dtype


def _check_arguments(out_dir: Path, tokenizer: Optional[PathLike], dtype: Any, model_sd: Dict[str, Any],
                     config: Dict[str, Any]) -> None:
    """:func:`write_hf_checkpoint`'s refusals, each naming the argument: no tokenizer (or one that does not exist),
    a dtype that is no ``torch.dtype``, adapter weights not merged, a config that does not fit the weights."""
    where = f"write_hf_checkpoint({str(out_dir)!r})"
    if tokenizer is None and not has_tokenizer(out_dir):
        raise ValueError(
            f"{where}: no tokenizer given; every checkpoint folder carries its tokenizer so that lm-eval's hf model "
            "and AutoTokenizer load it alone: pass tokenizer=<folder or tokenizer file>"
        )
    if tokenizer is not None and not Path(tokenizer).exists():
        raise FileNotFoundError(f"{where}: tokenizer={str(tokenizer)!r} does not exist: pass the tokenizer's folder "
                                "or file")
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise ValueError(f"write_hf_checkpoint: dtype={dtype!r} is not a torch.dtype: pass torch.bfloat16, "
                         "torch.float16 or torch.float32 (or None: as in the state dict)")
    adapters = [k for k in model_sd if is_adapter_key(k)]
    if adapters:
        raise ValueError(
            f"write_hf_checkpoint: the state dict holds adapter weights ({adapters[:2]}...): merge them first with "
            "torchtune.modules.peft.get_merged_lora_ckpt"
        )
    _check_dimensions(model_sd, config, where)


def _check_dimensions(model_sd: Dict[str, Any], config: Dict[str, Any], where: str) -> None:
    """The config's vocabulary, width and depth against the weights (torchtune's conversion failed on a reshape,
    deep inside, naming neither)."""
    emb = model_sd.get("tok_embeddings.weight")
    if emb is None:
        raise ValueError(f"{where}: the state dict is not a torchtune decoder's (no tok_embeddings.weight; keys such "
                         f"as {sorted(model_sd)[:2]}): save a torchtune model (a transformers model saves itself "
                         "with save_pretrained)")
    said = {k: config.get(k) for k in ("vocab_size", "hidden_size")}
    if all(isinstance(v, int) for v in said.values()) \
            and tuple(emb.shape) != (said["vocab_size"], said["hidden_size"]):
        raise ValueError(f"{where}: the model's embedding is {list(emb.shape)} but the config says vocab_size="
                         f"{said['vocab_size']}, hidden_size={said['hidden_size']}: pass the config the model was "
                         "built from")
    depth = len({k.split(".")[1] for k in model_sd if k.startswith("layers.")})
    if isinstance(config.get("num_hidden_layers"), int) and depth != config["num_hidden_layers"]:
        raise ValueError(f"{where}: the model has {depth} layers but the config says num_hidden_layers="
                         f"{config['num_hidden_layers']}: pass the config the model was built from")
    q, heads, width = (model_sd.get("layers.0.attn.q_proj.weight"), config.get("num_attention_heads"),
                       config.get("hidden_size"))
    if not (isinstance(heads, int) and heads > 0 and isinstance(width, int)):
        return
    dim = config.get("head_dim") or width // heads
    if q is not None and isinstance(dim, int) and q.shape[0] != heads * dim:
        raise ValueError(f"{where}: the model's queries are {q.shape[0]} wide but the config says "
                         f"num_attention_heads={heads} x head_dim={dim}: pass the config the model was built from")


def _plain_tensor(v: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """A contiguous CPU tensor safetensors can store (NF4 / DTensor state-dict entries are dequantized / gathered)."""
    if hasattr(v, "full_tensor"):
        v = v.full_tensor()
    if type(v) is not torch.Tensor and hasattr(v, "get_original_weight"):  # torchao NF4Tensor
        v = v.get_original_weight()
    v = v.detach().cpu()
    if dtype is not None:
        v = v.to(dtype)
    return v.contiguous()


def _write_shards(out_dir: Path, hf_sd: Dict[str, torch.Tensor], max_shard_bytes: int, save_file) -> None:
    """The shards and index ``huggingface_hub.save_torch_state_dict`` writes, byte for byte (its own
    ``split_torch_state_dict_into_shards`` lays them out: a tensor over ``max_shard_bytes`` in a shard of its own,
    the current one filled on), except that one shard keeps the sharded name and an index (the hub writes
    ``model.safetensors`` alone) and that nothing already in ``out_dir`` is deleted (the hub removes every
    ``model*.safetensors`` and index there first)."""
    from huggingface_hub import split_torch_state_dict_into_shards  # deferred: huggingface_hub (the writer alone)

    split = split_torch_state_dict_into_shards(hf_sd, max_shard_size=max_shard_bytes)
    files = split.filename_to_tensors if split.is_sharded else {
        "model-00001-of-00001.safetensors": list(split.tensor_to_filename)}
    for name, keys in files.items():
        save_file({k: hf_sd[k] for k in keys}, str(out_dir / name), metadata={"format": "pt"})
        plain_file_mode(out_dir / name)  # safetensors >= 0.8 leaves 0600
    index = {"metadata": split.metadata, "weight_map": {k: name for name, keys in files.items() for k in keys}}
    (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2))


def save_hf_checkpoint(
    model: nn.Module,
    out_dir: PathLike,
    config: Union[Dict[str, Any], PathLike, CheckpointFolder],
    *,
    tokenizer: Optional[PathLike] = None,
    dtype: Optional[torch.dtype] = None,
) -> Path:
    """Save a (scaled) torchtune decoder as a checkpoint folder (see :func:`write_hf_checkpoint`).

    Args:
        model: a torchtune decoder of a family in the table (LoRA weights must be merged first: torchtune's
            ``get_merged_lora_ckpt``).
        out_dir: the folder to write.
        config: the source checkpoint (an open :class:`CheckpointFolder`, its folder path, a ``config.json`` path or
            the parsed dict).
        tokenizer: tokenizer folder or file; default: the source checkpoint folder's tokenizer files.
        dtype: weights dtype to save (default: as in the model).
    """
    _check_save_folder(Path(out_dir))
    if isinstance(config, CheckpointFolder) or (not isinstance(config, dict) and Path(config).is_dir()):
        folder = CheckpointFolder.open(config)
        if tokenizer is None and folder.tokenizer_file is not None:
            tokenizer = folder.path
        config = folder.config
    elif not isinstance(config, dict):  # a config.json file: the tokenizer beside it, as for its folder
        if not Path(config).is_file():
            raise FileNotFoundError(f"save_hf_checkpoint: config={str(config)!r} does not exist: pass the source "
                                    "checkpoint folder, its config.json, an open CheckpointFolder or the parsed dict")
        if tokenizer is None and has_tokenizer(Path(config).parent):
            tokenizer = Path(config).parent
        try:
            config = json.loads(Path(config).read_text())
        except ValueError as err:
            raise ValueError(f"save_hf_checkpoint: config={str(config)!r} is not JSON ({err}): pass the source "
                             "checkpoint's config.json or its folder") from None
    return write_hf_checkpoint(
        out_dir,
        model.state_dict(),
        config,
        rope_spec=getattr(model, "rope_scaling", None),
        tokenizer=tokenizer,
        dtype=dtype,
    )


# A folder holding any of these and no config.json this package wrote is another checkpoint: saving there replaced
# its config.json and left its weights beside ours, and transformers loads model.safetensors before an index.
FOREIGN_CHECKPOINT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", INDEX_FILE,
                            "pytorch_model.bin.index.json")


def _check_save_folder(out_dir: Path) -> None:
    """Refuse an ``out_dir`` that is a file, or a folder holding a checkpoint this package did not write (the
    source checkpoint itself, say), before anything is written; an earlier save's folder is replaced."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"save_hf_checkpoint: out_dir={str(out_dir)!r} is a file: pass a folder (new, or an earlier "
                         "save's)")
    if not out_dir.is_dir():
        return
    config = out_dir / CONFIG_FILE
    if config.is_file():
        try:
            ours = bool(json.loads(config.read_text()).get(FORMAT_KEY))
        except (ValueError, OSError, AttributeError):
            ours = False
        if ours:
            return
    found = sorted(name for name in FOREIGN_CHECKPOINT_FILES if (out_dir / name).exists())
    found += sorted(p.name for p in out_dir.glob("model-*-of-*.safetensors"))[:2]
    if found:
        raise ValueError(f"save_hf_checkpoint: out_dir={str(out_dir)!r} holds a checkpoint this package did not write "
                         f"({', '.join(found)}): saving there would replace its config.json and leave its weights "
                         "beside the new ones (transformers loads model.safetensors first); pass a new folder")


__all__ = ["write_hf_checkpoint", "save_hf_checkpoint", "read_hf_config", "MAX_SHARD_BYTES"]


def write_rope_side_file(folder: Path, rope_sd: Dict[str, torch.Tensor]) -> None:
    """Write a model's learned RoPE parameters (CLEX's ODE) to ``folder``'s side file (:data:`ROPE_SIDE_FILE`), in
    float32, with the mode of a plain file."""
    from safetensors.torch import save_file

    side = Path(folder) / ROPE_SIDE_FILE
    side.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().float().contiguous().cpu() for k, v in rope_sd.items()}, str(side))
    plain_file_mode(side)
