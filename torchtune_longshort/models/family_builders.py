"""The torchtune decoder of each model family, built from a Hugging Face ``config.json``: torchtune's own component
builder (``torchtune.models.<family>._component_builders``) with the dimensions and the pre-trained RoPE base read
from the config, and the refusal of what a builder cannot build (:class:`UnsupportedModelError`).

Which builder a checkpoint folder gets is the family table's (:data:`~torchtune_longshort.models.families.
MODEL_FAMILIES`); nothing else calls these builders.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from torch import nn

from torchtune_longshort.launcher import launched_world_size

Config = Dict[str, Any]
# Which LoRA settings a builder takes (torchtune's lora_<family> keyword names).
LORA_KEYS = ("lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output", "lora_rank", "lora_alpha",
             "lora_dropout", "use_dora", "quantize_base")


class UnsupportedModelError(ValueError):
    """A ``config.json`` no family of :data:`~torchtune_longshort.models.families.MODEL_FAMILIES` builds (or a feature
    of it that none supports)."""


def rope_entry(config: Config) -> Tuple[str, Any]:
    """The RoPE entry of a config.json as transformers 5 reads it (``convert_rope_params_to_dict``: ``rope_scaling or
    rope_parameters``): its key (``rope_scaling`` where set, else ``rope_parameters``) and its value as written."""
    key = "rope_scaling" if config.get("rope_scaling") else "rope_parameters"
    return key, config.get(key)


def rope_theta_entry(config: Config) -> Tuple[str, Any]:
    """Where a config.json holds its pre-trained RoPE base, and the value as written, as transformers 5 reads it
    (``convert_rope_params_to_dict``): inside the RoPE entry (:func:`rope_entry`), else the top-level
    ``rope_theta`` (``"rope_parameters.rope_theta"``, ...); ``("rope_theta", 10000.0)`` where none does
    (transformers' default). The entry's wins where both hold one."""
    key, entry = rope_entry(config)
    if isinstance(entry, dict) and "rope_theta" in entry:  # setdefault there: a null one is the one read
        return f"{key}.rope_theta", entry["rope_theta"]
    if config.get("rope_theta") is not None:
        return "rope_theta", config["rope_theta"]
    return "rope_theta", 10_000.0


def with_rope_theta(config: Config, base: float) -> Dict[str, Any]:
    """A copy of ``config`` whose pre-trained RoPE base (:func:`rope_theta`) is ``base``: set at the top level and in
    the RoPE entry where :func:`rope_theta_entry` reads it there."""
    key = rope_theta_entry(config)[0].split(".")[0]
    new = {**config, "rope_theta": base}
    if key != "rope_theta":
        new[key] = {**config[key], "rope_theta": base}
    return new


def rope_theta(config: Config) -> float:
    """The pre-trained RoPE base of a config.json (inside its RoPE entry, else ``rope_theta``):
    :func:`rope_theta_entry`'s value."""
    return float(rope_theta_entry(config)[1])


def partial_rotary_factor(config: Config) -> float:
    """The rotated fraction of a head as transformers reads it: inside the RoPE entry (:func:`rope_entry`, where
    transformers 5 writes the key, Phi-3's included: ``rope_scaling`` where set, else ``rope_parameters``), else the
    top-level key of a 4.x config.json, else 1."""
    entry = rope_entry(config)[1]
    given = entry.get("partial_rotary_factor") if isinstance(entry, dict) else None
    return float(given if given is not None else config.get("partial_rotary_factor") or 1.0)


def _need(config: Config, key: str, where: str) -> Any:
    if key not in config or config[key] is None:
        raise UnsupportedModelError(f"{where}: config.json has no {key!r}, which the {config.get('model_type')!r} "
                                    "builder needs")
    return config[key]


def checkpoint_dims(config: Config, where: str) -> Dict[str, Any]:
    """Builder keywords every family shares, from a config.json."""
    heads = int(_need(config, "num_attention_heads", where))
    return dict(
        vocab_size=int(_need(config, "vocab_size", where)),
        num_layers=int(_need(config, "num_hidden_layers", where)),
        num_heads=heads,
        num_kv_heads=kv_heads(config),
        embed_dim=int(_need(config, "hidden_size", where)),
        intermediate_dim=int(_need(config, "intermediate_size", where)),
    )


SHAPE_KEYS = ("hidden_size", "num_attention_heads", "head_dim")


def transformers_default(config: Config, key: str) -> Any:
    """``config[key]`` of a config.json; left out, what transformers' config class of its ``model_type`` gives
    (``AutoConfig.for_model``); None where transformers does not know the model_type or the class has no such key."""
    if key in config:
        return config[key]
    from transformers import CONFIG_MAPPING, AutoConfig  # only for a folder that leaves the key out

    mt = config.get("model_type")
    if mt not in CONFIG_MAPPING:
        return None
    # the file's shape, which the class validates its defaults against (9 heads do not divide its default 4096 width)
    kwargs = {k: int(config[k]) for k in SHAPE_KEYS if config.get(k) is not None}
    return getattr(AutoConfig.for_model(mt, **kwargs), key, None)


def kv_heads(config: Config) -> int:
    """The key/value heads of a config.json: its ``num_key_value_heads``; left out, transformers' default for its
    ``model_type`` (LlamaConfig and Phi3Config ``num_attention_heads``, MistralConfig 8, Qwen2Config 32, GemmaConfig
    16); else (a null, a model_type transformers does not know) ``num_attention_heads``."""
    return int(transformers_default(config, "num_key_value_heads") or config["num_attention_heads"])


def norm_eps(config: Config, builder_default: float) -> float:
    """A config.json's ``rms_norm_eps``; left out, transformers' default for its ``model_type`` (LlamaConfig 1e-6,
    Phi3Config 1e-5, ...: torchtune's builder default is not the model), else ``builder_default``."""
    eps = transformers_default(config, "rms_norm_eps")
    return float(builder_default if eps is None else eps)


def _check_head_dim(config: Config, where: str) -> None:
    """torchtune's llama/mistral/qwen2/phi3 builders derive head_dim = hidden_size // num_heads."""
    hd = config.get("head_dim")
    derived = int(config["hidden_size"]) // int(config["num_attention_heads"])
    if hd is not None and int(hd) != derived:
        raise UnsupportedModelError(
            f"{where}: config.json head_dim={hd} differs from hidden_size // num_attention_heads = {derived}; "
            f"torchtune's {config.get('model_type')!r} builder derives the head size and cannot build it: this "
            f"model is not supported here (README, 'Model families'); lm-eval's --model hf evaluates it"
        )


def _check_activation(config: Config, where: str, accepted: Tuple[str, ...] = ("silu", "swish"),
                      what: str = "SiLU (SwiGLU)") -> None:
    """Refuse a config.json whose MLP activation the family's torchtune builder does not compute (it builds one
    activation whatever the config says: the model would load and give other logits than transformers)."""
    act = config.get("hidden_activation") or config.get("hidden_act")
    if act is not None and act not in accepted:
        key = "hidden_activation" if config.get("hidden_activation") else "hidden_act"
        raise UnsupportedModelError(f"{where}: config.json {key}={act!r}: torchtune's {config.get('model_type')!r} "
                                    f"builder computes {what} only ({', '.join(accepted)})")


def _no_bias(config: Config, where: str) -> None:
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key):
            raise UnsupportedModelError(
                f"{where}: config.json {key}=true: torchtune's {config.get('model_type')!r} builder has no biases "
                "(a Qwen2-style model with q/k/v biases has model_type 'qwen2')"
            )


def set_rope_base(model: nn.Module, base: float) -> None:
    """Rebuild the (shared) RoPE module of every attention with ``base``: torchtune's LoRA builders for Llama take
    no ``rope_base`` and always build base 10000."""
    seen = set()
    for m in model.modules():
        rope = getattr(m, "pos_embeddings", None)
        if rope is not None and id(rope) not in seen:
            seen.add(id(rope))
            if float(rope.base) != float(base):
                rope.base = base
                rope.rope_init()


# NF4 (QLoRA) quantizes blocks of 64 values, with their scalers in blocks of 256 (torchao's to_nf4 asserts both).
NF4_BLOCK = 64 * 256


def nf4_weight_shapes(config: Config, lora: Dict[str, Any]) -> Dict[str, Tuple[int, int]]:
    """``[out, in]`` of each weight torchtune's LoRA builders quantize with ``quantize_base``: every attention
    projection and MLP weight (adapted or frozen), and the output layer when LoRA adapts it."""
    dim, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or dim // heads)
    kv = kv_heads(config) * head_dim
    inter = int(config["intermediate_size"])
    shapes = {"q_proj": (heads * head_dim, dim), "k_proj": (kv, dim), "v_proj": (kv, dim),
              "output_proj": (dim, heads * head_dim), "w1": (inter, dim), "w2": (dim, inter), "w3": (inter, dim)}
    if lora.get("apply_lora_to_output"):
        shapes["output"] = (int(config["vocab_size"]), dim)
    return shapes


def check_nf4_shapes(config: Config, lora: Optional[Dict[str, Any]], where: str = "quantize_base",
                     world_size: Optional[int] = None) -> None:
    """Refuse ``quantize_base=True`` for a checkpoint with a weight NF4 cannot quantize (numel a multiple of
    ``NF4_BLOCK`` x the processes: ``world_size``, else the launcher's), before torchtune's builder meets torchao's
    assertion; ``where``: the setting's name in the message."""
    if not lora or not lora.get("quantize_base"):
        return
    world = max(1, launched_world_size() if world_size is None else world_size)
    shapes = nf4_weight_shapes(config, lora)
    bad = [f"{name} {shape}: {shape[0] * shape[1]} values" for name, shape in shapes.items()
           if (shape[0] * shape[1]) % (NF4_BLOCK * world)]
    if bad:
        per = f"{NF4_BLOCK} x {world} processes = {NF4_BLOCK * world}" if world > 1 else str(NF4_BLOCK)
        # fewer processes shard each weight in fewer, larger pieces: the most that fit, if any
        fits = next((n for n in range(world - 1, 0, -1)
                     if all(a * b % (NF4_BLOCK * n) == 0 for a, b in shapes.values())), None)
        fewer = f", run it on {fits} process{'es' if fits > 1 else ''} (--nproc_per_node {fits})" if fits else ""
        raise UnsupportedModelError(
            f"{where}=True (QLoRA): NF4 quantizes each weight in blocks of 64 x 256 values, so its numel must "
            f"be a multiple of {per}, not so in this {config.get('model_type')} checkpoint: {'; '.join(bad)}; set "
            f"quantize_base: False (LoRA on the full-precision weights){fewer}, or start from a checkpoint whose "
            f"weights' numel are multiples of {NF4_BLOCK * world}")


# ------------------------------------------------------------------------------------------ builders
def _lora(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """LoRA keywords for a torchtune lora builder (torchtune's names; ``lora_attn_modules`` as a list)."""
    out = {k: kwargs[k] for k in LORA_KEYS if k in kwargs and kwargs[k] is not None}
    out["lora_attn_modules"] = list(out.get("lora_attn_modules") or ["q_proj", "v_proj"])
    return out


def refuse_tied_output_lora(lora: Dict[str, Any], tied: bool, family: str) -> None:
    """LoRA on a tied output layer: torchtune's builders have none to adapt (its gemma builder has no such option, and
    the keyword was dropped without a word; its qwen2 builder raised its own message)."""
    if tied and lora.get("apply_lora_to_output"):
        raise UnsupportedModelError(f"apply_lora_to_output=True is not accepted for this {family} model: its output "
                                    "layer is tied to its embeddings (tie_word_embeddings=true), and torchtune's LoRA "
                                    "has no adapter for it; set apply_lora_to_output=False (train_embeddings_and_norms="
                                    "True trains the shared embedding)")


def build_llama(config: Config, max_seq_len: int, lora: Optional[Dict[str, Any]], tied: bool):
    from torchtune.models.llama2._component_builders import llama2, lora_llama2
    from torchtune.modules import TiedLinear

    where = "llama"
    _no_bias(config, where)
    _check_activation(config, where)
    _check_head_dim(config, where)
    kw = dict(checkpoint_dims(config, where), max_seq_len=max_seq_len, norm_eps=norm_eps(config, 1e-6))
    if lora:
        lk = _lora(lora)
        refuse_tied_output_lora(lk, tied, where)
        model = lora_llama2(**lk, **kw)
    else:
        model = llama2(**kw, rope_base=rope_theta(config))
    if tied:  # the untied output module is dropped; a TiedLinear is a plain object, not a submodule
        del model.output
        model.output = TiedLinear(model.tok_embeddings)
    set_rope_base(model, rope_theta(config))
    return model


def build_mistral(config: Config, max_seq_len: int, lora: Optional[Dict[str, Any]]):
    from torchtune.models.mistral._component_builders import lora_mistral, mistral

    _no_bias(config, "mistral")
    _check_activation(config, "mistral")
    _check_head_dim(config, "mistral")
    kw = dict(checkpoint_dims(config, "mistral"),
              max_seq_len=max_seq_len, norm_eps=norm_eps(config, 1e-6),  # MistralConfig's
              rope_base=rope_theta(config))
    return lora_mistral(**_lora(lora), **kw) if lora else mistral(**kw)


def build_qwen2(config: Config, max_seq_len: int, lora: Optional[Dict[str, Any]]):
    from torchtune.models.qwen2._component_builders import lora_qwen2, qwen2

    _check_head_dim(config, "qwen2")
    _check_activation(config, "qwen2")
    if config.get("use_sliding_window"):
        raise UnsupportedModelError("qwen2: config.json use_sliding_window=true: torchtune's qwen2 builder runs full "
                                    "attention only, which is not this model; one with use_sliding_window=false "
                                    "(Qwen2/2.5's own setting) is supported; lm-eval's --model hf evaluates this one")
    kw = dict(checkpoint_dims(config, "qwen2"),
              max_seq_len=max_seq_len, norm_eps=norm_eps(config, 1e-6),
              rope_base=rope_theta(config), tie_word_embeddings=bool(config.get("tie_word_embeddings", False)))
    if lora:
        refuse_tied_output_lora(lora, kw["tie_word_embeddings"], "qwen2")
    return lora_qwen2(**_lora(lora), **kw) if lora else qwen2(**kw)


def build_gemma(config: Config, max_seq_len: int, lora: Optional[Dict[str, Any]]):
    from torchtune.models.gemma._component_builders import gemma, lora_gemma

    _check_activation(config, "gemma", ("gelu_pytorch_tanh", "gelu"), "tanh-GELU")
    heads = int(config["num_attention_heads"])
    kw = dict(checkpoint_dims(config, "gemma"),
              max_seq_len=max_seq_len, norm_eps=norm_eps(config, 1e-6),
              rope_base=rope_theta(config),
              head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads))
    if lora:
        lk = _lora(lora)
        refuse_tied_output_lora(lk, True, "gemma")
        lk.pop("apply_lora_to_output", None)  # False: torchtune's lora_gemma has no such keyword
        return lora_gemma(**lk, **kw)
    return gemma(**kw)


def build_phi3(config: Config, max_seq_len: int, lora: Optional[Dict[str, Any]]):
    from torchtune.models.phi3._component_builders import lora_phi3, phi3

    _check_head_dim(config, "phi3")
    _check_activation(config, "phi3")
    # transformers 5 writes the key inside rope_parameters: read at the top level only, a re-saved Phi-4-mini was
    # built rotating every dimension and scored without a word
    if partial_rotary_factor(config) != 1.0:
        entry_key, entry = rope_entry(config)
        inside = isinstance(entry, dict) and "partial_rotary_factor" in entry
        key = f"{entry_key}.partial_rotary_factor" if inside else "partial_rotary_factor"
        raise UnsupportedModelError(f"phi3: config.json {key}={partial_rotary_factor(config)!r} != 1 (Phi-4-mini): "
                                    "torchtune's phi3 builder rotates every dimension; name a checkpoint whose RoPE "
                                    "rotates whole heads (Phi-3-mini, Phi-3.5-mini)")
    kw = dict(checkpoint_dims(config, "phi3"),
              max_seq_len=max_seq_len, norm_eps=norm_eps(config, 1e-5),
              rope_base=rope_theta(config))
    return lora_phi3(**_lora(lora), **kw) if lora else phi3(**kw)
