"""A random Llama checkpoint written by transformers itself (an independent writer and initialisation for parity
tests and benchmarks). The ``config.json`` of random weights the project builds is
:mod:`~torchtune_longshort.models.scratch_config`'s.

Loading any family's folder is :mod:`~torchtune_longshort.models.hf_model`'s; the folder format is
:mod:`~torchtune_longshort.models.hf_checkpoint`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

import torch

from torchtune_longshort.models.hf_checkpoint import PathLike
from torchtune_longshort.output_guard import plain_file_mode


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
    plain_file_mode(*Path(out_dir).glob("model*.safetensors"))  # safetensors >= 0.8 leaves 0600
    return out_dir
