"""Llama-2-family torchtune decoders and Hugging Face checkpoint folders: builder kwargs <-> ``config.json``,
loading a folder into a torchtune ``TransformerDecoder`` with its RoPE scaling, and a random checkpoint written by
transformers itself (an independent writer for parity tests).

The folder format (files, checks, reading and writing weights) is :mod:`torchtune_longshort.models.hf_checkpoint`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import nn

from torchtune_longshort.models.hf_checkpoint import (
    ROPE_SIDE_FILE,
    PathLike,
    check_checkpoint_folder,
    load_hf_state_dict,
    load_rope_parameters,
    read_hf_config,
)
from torchtune_longshort.models.hf_rope import SPEC_CONTEXT_KEYS, rope_spec_from_hf_config

# Keys of torchtune's llama-family builders -> config.json entries of transformers' Llama/Mistral configs.
_LLAMA_KEYS = {
    "vocab_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "embed_dim": "hidden_size",
    "intermediate_dim": "intermediate_size",
    "max_seq_len": "max_position_embeddings",
    "norm_eps": "rms_norm_eps",
    "rope_base": "rope_theta",
}


def hf_config_from_llama_kwargs(kwargs: Dict[str, Any], architecture: str = "LlamaForCausalLM") -> Dict[str, Any]:
    """A transformers ``config.json`` dict for a model built from scratch with torchtune's ``llama2(...)`` kwargs.

    ``intermediate_dim`` defaults as torchtune's llama2 builder does (``scale_hidden_dim_for_mlp``).
    """
    missing = [k for k in ("vocab_size", "num_layers", "num_heads", "embed_dim", "max_seq_len") if k not in kwargs]
    if missing:
        raise ValueError(
            f"model: training from scratch needs explicit dimensions; missing {missing} "
            "(give vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, max_seq_len)"
        )
    from torchtune.models.llama2._model_utils import scale_hidden_dim_for_mlp

    kw = dict(kwargs)
    kw.setdefault("num_kv_heads", kw["num_heads"])
    if kw.get("intermediate_dim") is None:
        kw["intermediate_dim"] = scale_hidden_dim_for_mlp(kw["embed_dim"])
    kw.setdefault("norm_eps", 1e-5)
    kw.setdefault("rope_base", 10_000.0)
    cfg = {hf: kw[tt] for tt, hf in _LLAMA_KEYS.items() if tt in kw}
    cfg.update(
        architectures=[architecture],
        model_type="llama",
        hidden_act="silu",
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float32",
        head_dim=kw["embed_dim"] // kw["num_heads"],
    )
    cfg["rope_theta"] = float(cfg["rope_theta"])
    return cfg


def llama2_from_hf_config(config: Dict[str, Any], max_seq_len: Optional[int] = None):
    """Build an (uninitialised) torchtune ``llama2`` decoder with the dimensions of an HF ``config.json``."""
    from torchtune.models.llama2 import llama2

    rope_base = config.get("rope_theta")
    if rope_base is None:
        rope_base = (config.get("rope_parameters") or {}).get("rope_theta", 10_000.0)
    return llama2(
        vocab_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        num_kv_heads=config.get("num_key_value_heads", config["num_attention_heads"]),
        embed_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_seq_len=max_seq_len or config.get("max_position_embeddings", 4096),
        norm_eps=config.get("rms_norm_eps", 1e-5),
        rope_base=float(rope_base),
    )


def load_llama2_hf_checkpoint(
    checkpoint_dir: PathLike,
    max_seq_len: Optional[int] = None,
    dtype: torch.dtype = torch.float32,
    device: Union[str, torch.device] = "cpu",
):
    """Load a Hugging Face-format Llama-2-family checkpoint into a torchtune ``TransformerDecoder`` (plain RoPE,
    ``rope_theta`` of config.json). :func:`load_hf_checkpoint` applies the RoPE scaling on top."""
    from torchtune.models.convert_weights import hf_to_tune

    config = read_hf_config(checkpoint_dir)
    with torch.device("meta"):
        model = llama2_from_hf_config(config, max_seq_len=max_seq_len)
    sd = hf_to_tune(
        load_hf_state_dict(checkpoint_dir),
        num_heads=config["num_attention_heads"],
        num_kv_heads=config.get("num_key_value_heads", config["num_attention_heads"]),
        dim=config["hidden_size"],
        head_dim=config.get("head_dim"),
    )
    model = model.to_empty(device=device)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    # RoPE caches are buffers that checkpoints do not hold; anything else missing is an error.
    missing = [k for k in missing if "pos_embeddings" not in k]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {str(checkpoint_dir)!r} does not match the llama2 architecture: "
            f"missing={missing[:5]} unexpected={unexpected[:5]}"
        )
    for m in model.modules():
        if hasattr(m, "rope_init"):
            m.rope_init()
    return model.to(dtype=dtype).eval()


def load_hf_checkpoint(
    checkpoint_dir: PathLike,
    rope: Optional[Union[str, Dict[str, Any]]] = None,
    max_seq_len: Optional[int] = None,
    dtype: torch.dtype = torch.float32,
    device: Union[str, torch.device] = "cpu",
) -> nn.Module:
    """Load a Llama-2-family HF checkpoint into torchtune and apply RoPE scaling.

    Args:
        checkpoint_dir: a checkpoint folder (see module doc); checked with :func:`check_checkpoint_folder`.
        rope: the scaling to apply: a spec dict (``{"method": "yarn", "factor": 4, ...}``), a method name (its
            defaults, e.g. factor L'/L), or None to take it from config.json (our ``longshort_rope`` key, else the
            transformers ``rope_scaling``/``rope_parameters``); no scaling there gives plain RoPE.
        max_seq_len: target context length; default the spec's ``max_seq_len``, else ``max_position_embeddings``.
        dtype, device: of the returned model (RoPE caches stay float32).

    Returns:
        a torchtune ``TransformerDecoder`` in eval mode; learned RoPE parameters (CLEX) come from the side file.
    """
    from torchtune_longshort.models.rope_scaling import apply_rope_scaling

    check_checkpoint_folder(checkpoint_dir)
    config = read_hf_config(checkpoint_dir)
    if isinstance(rope, str):
        rope = {"method": rope}
    if rope is not None and not (isinstance(rope, dict) and "method" in rope):
        raise ValueError(f"rope={rope!r} is not accepted: expected a method name, a spec dict with 'method', or None")
    from_config = rope is None
    spec = rope_spec_from_hf_config(config) if from_config else dict(rope)
    plain_len = int(config.get("max_position_embeddings", 4096))
    if spec is None:
        return load_llama2_hf_checkpoint(checkpoint_dir, max_seq_len=max_seq_len, dtype=dtype, device=device)

    target = max_seq_len or spec.get("max_seq_len") or plain_len
    # The stored pre-trained length and base, not the (possibly scaled) ones in config.json.
    original = spec.get("original_max_seq_len")
    if original is None and not from_config:
        original = plain_len
    base = spec.get("base")
    model = load_llama2_hf_checkpoint(checkpoint_dir, max_seq_len=original or target, dtype=dtype, device=device)
    if base is None:
        base = model.layers[0].attn.pos_embeddings.base
    kwargs = {k: v for k, v in spec.items() if k not in SPEC_CONTEXT_KEYS}
    apply_rope_scaling(model, spec["method"], target, original_max_seq_len=original, base=base, **kwargs)

    learned = load_rope_parameters(checkpoint_dir) if from_config else {}
    if learned:
        rope_module = model.layers[0].attn.pos_embeddings
        try:
            rope_module.load_state_dict(learned, strict=True)
        except RuntimeError as e:
            raise ValueError(
                f"checkpoint {str(checkpoint_dir)!r}: {ROPE_SIDE_FILE} does not fit RoPE method "
                f"{spec['method']!r} of config.json: {e}"
            ) from None
    return model.to(device=device).eval()


def write_random_llama2_checkpoint(
    out_dir: PathLike,
    *,
    vocab_size: int,
    embed_dim: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: Optional[int] = None,
    intermediate_dim: int = 172,
    max_seq_len: int = 256,
    rope_base: float = 10_000.0,
    norm_eps: float = 1e-5,
    seed: int = 0,
    rope_scaling: Optional[Dict[str, Any]] = None,
    dtype: str = "float32",
    device: str = "cpu",
) -> Path:
    """Write a randomly initialised Llama-2-shaped model in Hugging Face format with transformers' own
    ``save_pretrained`` (an independent writer and initialisation, which parity tests want). ``dtype``
    (``float32`` / ``bfloat16``) is the stored precision; ``device`` where the weights are initialised (``cuda``
    makes a 7B shape in seconds; the random values then differ from a CPU initialisation with the same seed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = dict(
        vocab_size=vocab_size,
        hidden_size=embed_dim,
        intermediate_size=intermediate_dim,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        max_position_embeddings=max_seq_len,
        rms_norm_eps=norm_eps,
        rope_theta=rope_base,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype=dtype,
    )
    if rope_scaling is not None:
        cfg["rope_scaling"] = rope_scaling
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    return out_dir
