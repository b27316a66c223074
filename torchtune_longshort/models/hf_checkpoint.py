"""Hugging Face-format Llama-2 checkpoints: write a random one (tests, offline pre-training) and load one.

Loading goes through torchtune's own ``convert_weights.hf_to_tune`` (the same q/k permutation its
``FullModelHFCheckpointer`` applies), so a checkpoint written by transformers and loaded here has its RoPE
pairs in torchtune's interleaved layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch

PathLike = Union[str, Path]


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
    """Write a randomly initialised Llama-2-shaped model in Hugging Face format (``config.json`` + safetensors).

    The weights come from transformers' ``LlamaForCausalLM`` initialisation (seeded), i.e. an independent
    implementation from torchtune's, which is what parity tests want. ``dtype`` (``float32`` / ``bfloat16``) is the
    stored precision; ``device`` where the weights are initialised (``cuda`` makes a 7B shape in seconds; the
    random values then differ from a CPU initialisation with the same seed).

    Returns:
        ``out_dir`` as a Path.
    """
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


def read_hf_config(checkpoint_dir: PathLike) -> Dict[str, Any]:
    """Read ``config.json`` from a Hugging Face checkpoint folder, with a clear error if it is missing."""
    path = Path(checkpoint_dir) / "config.json"
    if not Path(checkpoint_dir).is_dir():
        raise FileNotFoundError(f"checkpoint_dir={str(checkpoint_dir)!r} is not a directory")
    if not path.is_file():
        raise FileNotFoundError(
            f"checkpoint_dir={str(checkpoint_dir)!r} has no config.json: expected a Hugging Face-format checkpoint"
        )
    return json.loads(path.read_text())


def hf_weight_files(checkpoint_dir: PathLike) -> list[Path]:
    """The weight files of a Hugging Face checkpoint: ``*.safetensors`` if any, else ``pytorch_model*.bin``."""
    d = Path(checkpoint_dir)
    files = sorted(d.glob("*.safetensors")) or sorted(d.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(
            f"checkpoint_dir={str(d)!r} holds no *.safetensors or pytorch_model*.bin weight files"
        )
    return files


def load_hf_state_dict(checkpoint_dir: PathLike) -> Dict[str, torch.Tensor]:
    """Load and merge every weight file of a Hugging Face checkpoint (HF key names, HF q/k layout)."""
    from safetensors.torch import load_file

    sd: Dict[str, torch.Tensor] = {}
    for f in hf_weight_files(checkpoint_dir):
        if f.suffix == ".safetensors":
            sd.update(load_file(str(f)))
        else:
            sd.update(torch.load(str(f), map_location="cpu", weights_only=True))
    return sd


def llama2_from_hf_config(config: Dict[str, Any], max_seq_len: Optional[int] = None):
    """Build an (uninitialised) torchtune ``llama2`` decoder with the dimensions of an HF ``config.json``.

    Args:
        config: the parsed ``config.json``.
        max_seq_len: cache length for RoPE / KV cache; defaults to ``max_position_embeddings``.
    """
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
    """Load a Hugging Face-format Llama-2 checkpoint into a torchtune ``TransformerDecoder`` (plain RoPE).

    RoPE scaling is applied separately (``torchtune_longshort.models`` / ``rope``), so the same loader serves
    every method. Returns the model in eval mode.
    """
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
