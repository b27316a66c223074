"""The ``config.json`` of a model built from random weights: torchtune's builder dimension keywords
(``vocab_size``, ``num_layers``, ..., ``max_seq_len``) written as the Hugging Face config of the family that builds
it, so the family builds it back from that config (:func:`~torchtune_longshort.models.hf_model.hf_decoder` with
``family:``) and the recipe writes it as ``step_0``'s ``config.json`` from the same function.

One writer per family of :data:`~torchtune_longshort.models.families.MODEL_FAMILIES` that has one (the Llama
families); the others are refused there with their name.
"""

from __future__ import annotations

import math
from typing import Any, Dict

# The dimension keywords a config may give (torchtune's builder names), besides max_seq_len.
DIMENSION_KEYS = ("vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "intermediate_dim",
                  "norm_eps", "rope_base")
# torchtune's llama builder keywords -> config.json entries of transformers' LlamaConfig.
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


def _check_counts(kw: Dict[str, Any]) -> None:
    """The integer dimensions of ``kw``: each an integer >= 1, and heads that divide into an even head size (RoPE
    rotates pairs) and into the key/value heads; ``ValueError`` starting ``<keyword>=<value>`` (the config check
    adds the node's path: :func:`~torchtune_longshort.training.model_setup.scratch_config`; torchtune's builder took
    0 layers or an odd head size and failed at the first forward)."""
    for key in ("vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "intermediate_dim",
                "max_seq_len"):
        v = kw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{key}={v!r} is not accepted: expected an integer >= 1")
    heads, kv, dim = kw["num_heads"], kw["num_kv_heads"], kw["embed_dim"]
    if heads % kv:
        raise ValueError(f"num_heads={heads} is not divisible by num_kv_heads={kv} (each key/value head serves "
                         f"num_heads / num_kv_heads query heads); give num_kv_heads a divisor of {heads}")
    if dim % heads:
        raise ValueError(f"embed_dim={dim} is not divisible by num_heads={heads} (each head takes embed_dim / "
                         "num_heads); give a multiple of num_heads")
    if (dim // heads) % 2:
        raise ValueError(f"embed_dim={dim} / num_heads={heads} gives head size {dim // heads}, odd: RoPE "
                         "rotates pairs of dimensions; give an even head size")


def llama_config(dims: Dict[str, Any], tied: bool) -> Dict[str, Any]:
    """A transformers ``config.json`` dict of a Llama (``tied``: output tied to the embeddings, as Llama-3.2 and
    SmolLM) with torchtune's ``llama2(...)`` dimension keywords ``dims``.

    ``num_kv_heads`` defaults to ``num_heads``, ``intermediate_dim`` as torchtune's llama2 builder does
    (``scale_hidden_dim_for_mlp``), ``norm_eps`` 1e-5, ``rope_base`` 10000.
    """
    missing = [k for k in ("vocab_size", "num_layers", "num_heads", "embed_dim", "max_seq_len") if dims.get(k) is None]
    if missing:
        raise ValueError(
            f"model: random weights are built from explicit dimensions; missing {missing} (give vocab_size, "
            "num_layers, num_heads, num_kv_heads, embed_dim, intermediate_dim, max_seq_len)"
        )
    from torchtune.models.llama2._model_utils import scale_hidden_dim_for_mlp

    kw = {k: v for k, v in dims.items() if v is not None}
    kw.setdefault("num_kv_heads", kw["num_heads"])
    _check_counts(kw)
    kw.setdefault("intermediate_dim", scale_hidden_dim_for_mlp(kw["embed_dim"]))
    kw.setdefault("norm_eps", 1e-5)
    kw.setdefault("rope_base", 10_000.0)
    # norm_eps is RMSNorm's guard in x / sqrt(mean(x^2) + eps): at 1 or more it outweighs the mean square of unit-scale
    # activations and the layer no longer normalizes (norm_eps=3 trained without a word); models use 1e-5 or 1e-6
    for key, low, high in (("norm_eps", 0.0, 1.0), ("rope_base", 1.0, math.inf)):
        v = kw[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not low < v < high:
            raise ValueError(f"{key}={v!r} is not accepted: expected a finite number > {low:g}"
                             + (f" and < {high:g} (an epsilon: 1e-05 for Llama-2)" if high < math.inf else ""))
    cfg = {hf: kw[tt] for tt, hf in _LLAMA_KEYS.items()}
    cfg.update(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_act="silu",
        tie_word_embeddings=tied,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float32",
        head_dim=kw["embed_dim"] // kw["num_heads"],
    )
    cfg["rope_theta"] = float(cfg["rope_theta"])
    return cfg
