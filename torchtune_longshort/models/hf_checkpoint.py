"""The Hugging Face checkpoint folder: the one module that writes and reads it.

A folder this project writes (the recipe's ``step_<k>``, ``step_0``, :func:`save_hf_checkpoint`)::

    config.json                          transformers config + RoPE entries (``hf_rope.hf_config_updates``)
                                         + ``"longshort_checkpoint_format": 1``
    model-00001-of-0000N.safetensors     weights in HF key names and HF q/k layout, sharded
    model.safetensors.index.json         weight_map: every key -> its shard
    longshort_rope/rope_params.safetensors   learnable RoPE parameters (CLEX's ODE), only for such methods
    tokenizer.model, tokenizer.json, tokenizer_config.json, special_tokens_map.json
                                         so ``AutoTokenizer`` and ``lm-eval --model hf --model_args pretrained=DIR``
                                         work with nothing else

Everything that reads a checkpoint (the recipe through torchtune's checkpointer, ``hf_llama.load_hf_checkpoint``, the
``longshort`` eval model, the misalignment CLI, the study) first calls :func:`check_checkpoint_folder`, which
refuses an incomplete folder (missing config, index, shard, side file or tokenizer) with the path and what is
missing. Foreign folders (a base model from the hub, transformers' ``save_pretrained``) load too: they need no
tokenizer unless the caller needs one, and a single ``model.safetensors`` needs no index.

The tokenizer files are written or copied by :mod:`~torchtune_longshort.models.hf_tokenizer`; loading a folder into a
torchtune decoder (with its RoPE scaling) is :mod:`~torchtune_longshort.models.hf_llama`'s.

Weights are converted with torchtune's own ``convert_weights.tune_to_hf`` / ``hf_to_tune`` (the q/k permutation
its ``FullModelHFCheckpointer`` applies), so a folder loads identically in torchtune and in transformers.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch
from torch import nn

from torchtune_longshort.models.hf_rope import (
    SPEC_KEY,
    check_hf_config_consistent,
    rope_spec_from_hf_config,
    split_rope_state_dict,
    transformers_representable,
    update_hf_config,
)
from torchtune_longshort.models.hf_tokenizer import copy_tokenizer, has_tokenizer

PathLike = Union[str, Path]
logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
# In a subfolder: loaders that glob the checkpoint folder for *.safetensors must not take it for model weights.
ROPE_SIDE_FILE = "longshort_rope/rope_params.safetensors"
FORMAT_KEY = "longshort_checkpoint_format"
FORMAT_VERSION = 1
MAX_SHARD_BYTES = 5 * 1024**3  # transformers' save_pretrained default


# ----------------------------------------------------------------------------------------------- config.json
def read_hf_config(checkpoint_dir: PathLike) -> Dict[str, Any]:
    """Read ``config.json`` from a Hugging Face checkpoint folder, with a clear error if it is missing."""
    d = Path(checkpoint_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint_dir={str(checkpoint_dir)!r} is not a directory")
    path = d / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"checkpoint_dir={str(checkpoint_dir)!r} has no config.json: expected a Hugging Face-format checkpoint"
        )
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


# ----------------------------------------------------------------------------------------------- checking
def _learnable_rope(spec: Optional[Dict[str, Any]]) -> bool:
    """Whether ``spec``'s method has learned parameters (asks the method's class)."""
    if not spec:
        return False
    from torchtune_longshort.rope import ROPE_METHODS

    cls = ROPE_METHODS.get(spec["method"])
    return cls is not None and getattr(cls, "has_learned_parameters", False)


def check_checkpoint_folder(checkpoint_dir: PathLike, *, need_tokenizer: bool = False) -> List[Path]:
    """Refuse an incomplete or inconsistent checkpoint folder; return its weight files.

    Checks, each failing with the path and what is missing:
    - ``config.json`` exists and parses; its transformers RoPE entries agree with its ``longshort_rope`` spec;
    - with ``model.safetensors.index.json``: every shard it names exists; sharded files without an index fail;
    - a RoPE method with learned parameters has its side file, and a side file belongs to such a method;
    - a folder this project wrote (``longshort_checkpoint_format``), or any folder when ``need_tokenizer``, holds
      ``tokenizer.model`` or ``tokenizer.json``.
    """
    d = Path(checkpoint_dir)
    config = read_hf_config(d)
    check_hf_config_consistent(config, where=str(d / CONFIG_FILE))
    files = _weight_files(d)

    spec = rope_spec_from_hf_config(config)
    side = d / ROPE_SIDE_FILE
    if _learnable_rope(spec) and not side.is_file():
        raise FileNotFoundError(
            f"checkpoint {str(d)!r}: config.json names RoPE method {spec['method']!r}, whose learned parameters "
            f"live in {ROPE_SIDE_FILE}, but {side} is missing"
        )
    if side.is_file() and not _learnable_rope(spec):
        method = spec["method"] if spec else "plain RoPE"
        raise ValueError(
            f"checkpoint {str(d)!r}: {ROPE_SIDE_FILE} holds learned RoPE parameters, but config.json's RoPE "
            f"scaling is {method!r}, which has none: config.json and the side file disagree"
        )
    if config.get(FORMAT_KEY) or need_tokenizer:
        if not has_tokenizer(d):
            why = "was written by torchtune_longshort, which always saves" if config.get(FORMAT_KEY) else "needs"
            raise FileNotFoundError(
                f"checkpoint {str(d)!r} has no tokenizer (tokenizer.model or tokenizer.json): this folder {why} one"
            )
    return files


def _weight_files(d: Path) -> List[Path]:
    index = d / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise ValueError(f"{index}: not a safetensors index (expected JSON with a 'weight_map'): {e}") from None
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (d / n).is_file()]
        if missing:
            raise FileNotFoundError(f"checkpoint {str(d)!r}: {index.name} names shard(s) {missing} that are missing")
        return [d / n for n in names]
    sharded = sorted(d.glob("model-*-of-*.safetensors"))
    if sharded:
        raise FileNotFoundError(
            f"checkpoint {str(d)!r} holds sharded weights ({sharded[0].name}, ...) but no {INDEX_FILE}"
        )
    files = sorted(d.glob("*.safetensors")) or sorted(d.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"checkpoint {str(d)!r} holds no *.safetensors or pytorch_model*.bin weight files")
    return files


def weight_files(checkpoint_dir: PathLike) -> List[str]:
    """File names of the weights of a checkpoint folder (checked), e.g. for torchtune's ``checkpoint_files``."""
    return [p.name for p in check_checkpoint_folder(checkpoint_dir)]


def checkpoint_fingerprint(checkpoint_dir: PathLike) -> str:
    """A cheap identity of a checkpoint folder's current content: sha256 over ``config.json``'s bytes and each
    weight file's name, size and modification time (no weights are read). The same folder rewritten by another
    training run gets another fingerprint, so results of two checkpoints are never taken for one run."""
    import hashlib

    d = Path(checkpoint_dir)
    h = hashlib.sha256((d / CONFIG_FILE).read_bytes())
    for f in check_checkpoint_folder(d):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------------------------- reading
def load_hf_state_dict(checkpoint_dir: PathLike) -> Dict[str, torch.Tensor]:
    """Load and merge every weight file of a checked checkpoint folder (HF key names, HF q/k layout)."""
    from safetensors.torch import load_file

    sd: Dict[str, torch.Tensor] = {}
    for f in check_checkpoint_folder(checkpoint_dir):
        try:
            if f.suffix == ".safetensors":
                sd.update(load_file(str(f)))
            else:
                sd.update(torch.load(str(f), map_location="cpu", weights_only=True))
        except Exception as e:  # safetensors raises its own error types; name the file whatever they are
            raise ValueError(f"cannot read weight file {f}: {type(e).__name__}: {e}") from None
    return sd


def load_rope_parameters(checkpoint_dir: PathLike) -> Dict[str, torch.Tensor]:
    """The learned RoPE parameters of a checkpoint (keyed by their name inside the RoPE module); {} if none."""
    side = Path(checkpoint_dir) / ROPE_SIDE_FILE
    if not side.is_file():
        return {}
    from safetensors.torch import load_file

    try:
        return load_file(str(side))
    except Exception as e:
        raise ValueError(f"cannot read RoPE side file {side}: {type(e).__name__}: {e}") from None


# ----------------------------------------------------------------------------------------------- writing
def write_hf_checkpoint(
    out_dir: PathLike,
    tune_state_dict: Dict[str, torch.Tensor],
    hf_config: Dict[str, Any],
    *,
    rope_spec: Optional[Dict[str, Any]] = None,
    tokenizer: Optional[PathLike] = None,
    dtype: Optional[torch.dtype] = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path:
    """Write a torchtune llama-family state dict as a checkpoint folder (see module doc).

    Args:
        out_dir: the folder to fill (created).
        tune_state_dict: torchtune key names; learned RoPE parameters (``*.pos_embeddings.*``) go to the side file;
            adapter weights are refused (merge them first: torchtune's ``get_merged_lora_ckpt``).
        hf_config: the base config.json (the source checkpoint's, or ``hf_llama.hf_config_from_llama_kwargs``).
        rope_spec: the model's RoPE scaling spec (``model.rope_scaling``); None for plain RoPE.
        tokenizer: a ``tokenizer.model`` path or a tokenizer folder to copy in (see :func:`copy_tokenizer`);
            required unless ``out_dir`` already holds one.
        dtype: weight dtype to save (default: as in the state dict).
        max_shard_bytes: shard size limit.

    Returns:
        ``out_dir`` as a Path.
    """
    from safetensors.torch import save_file
    from torchtune.models.convert_weights import tune_to_hf

    out_dir = Path(out_dir)
    if tokenizer is None and not has_tokenizer(out_dir):
        raise ValueError(
            f"write_hf_checkpoint({str(out_dir)!r}): no tokenizer given; every checkpoint folder carries its tokenizer "
            "so that lm-eval's hf model and AutoTokenizer load it alone: pass tokenizer=<tokenizer.model or folder>"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    model_sd, rope_sd = split_rope_state_dict(tune_state_dict)
    adapters = [k for k in model_sd if "lora_" in k or k.endswith("magnitude")]
    if adapters:
        raise ValueError(
            f"write_hf_checkpoint: the state dict holds adapter weights ({adapters[:2]}...): merge them first with "
            "torchtune.modules.peft.get_merged_lora_ckpt"
        )
    num_heads = hf_config["num_attention_heads"]
    hf_sd = tune_to_hf(
        model_sd,
        num_heads=num_heads,
        num_kv_heads=hf_config.get("num_key_value_heads", num_heads),
        dim=hf_config["hidden_size"],
        head_dim=hf_config.get("head_dim"),
    )
    hf_sd = {k: _plain_tensor(v, dtype) for k, v in hf_sd.items()}
    _write_shards(out_dir, hf_sd, max_shard_bytes, save_file)
    if rope_sd:
        (out_dir / ROPE_SIDE_FILE).parent.mkdir(exist_ok=True)
        save_file({k: v.float().contiguous() for k, v in rope_sd.items()}, str(out_dir / ROPE_SIDE_FILE))

    config = update_hf_config(hf_config, rope_spec)
    if not rope_spec:
        for k in (SPEC_KEY, "rope_scaling"):
            config.pop(k, None)
    elif not transformers_representable(rope_spec):
        logger.warning(
            "RoPE method %r is not representable in transformers: %s loads with torchtune_longshort "
            "(lm-eval --model longshort) only; transformers refuses it (config.json rope_type says why)",
            rope_spec["method"],
            out_dir,
        )
    config[FORMAT_KEY] = FORMAT_VERSION
    if dtype is not None or "torch_dtype" not in config:
        name = str(dtype or next(iter(hf_sd.values())).dtype).replace("torch.", "")
        config["torch_dtype"] = config["dtype"] = name
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    if tokenizer is not None:
        copy_tokenizer(tokenizer, out_dir)
    return out_dir


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
    shards: List[Dict[str, torch.Tensor]] = [{}]
    size = 0
    for k, v in hf_sd.items():
        n = v.numel() * v.element_size()
        if shards[-1] and size + n > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][k] = v
        size += n
    total = len(shards)
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{total:05d}.safetensors"
        save_file(shard, str(out_dir / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
    index = {
        "metadata": {"total_size": sum(v.numel() * v.element_size() for v in hf_sd.values())},
        "weight_map": weight_map,
    }
    (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2))


def save_hf_checkpoint(
    model: nn.Module,
    out_dir: PathLike,
    config: Union[Dict[str, Any], PathLike],
    *,
    tokenizer: Optional[PathLike] = None,
    dtype: Optional[torch.dtype] = None,
) -> Path:
    """Save a (scaled) torchtune Llama-2-family model as a checkpoint folder (see :func:`write_hf_checkpoint`).

    Args:
        model: a torchtune decoder (LoRA weights must be merged first: torchtune's ``get_merged_lora_ckpt``).
        out_dir: the folder to write.
        config: the source checkpoint's config.json (dict, or the checkpoint folder / file path).
        tokenizer: ``tokenizer.model`` path or tokenizer folder; default: the source checkpoint folder's tokenizer
            when ``config`` is a folder that has one.
        dtype: weights dtype to save (default: as in the model).
    """
    if not isinstance(config, dict):
        p = Path(config)
        if p.is_dir():
            if tokenizer is None and has_tokenizer(p):
                tokenizer = p
            config = read_hf_config(p)
        else:
            config = json.loads(p.read_text())
    return write_hf_checkpoint(
        out_dir,
        model.state_dict(),
        config,
        rope_spec=getattr(model, "rope_scaling", None),
        tokenizer=tokenizer,
        dtype=dtype,
    )


