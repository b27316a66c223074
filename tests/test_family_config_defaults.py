"""A config.json that leaves a key out is read as transformers reads it: each family's builder takes the default of
transformers' own config class (the reference, asked here, never restated) for the norm epsilon, the RoPE base and
the output tying; a tied folder that still stores ``lm_head`` converts to the keys of the tied torchtune model."""

from __future__ import annotations

import pytest
import torch

from torchtune_longshort.models.families import MODEL_FAMILIES, family_of

# tiny dimensions every family's builder takes (head_dim 8, GQA 4/2)
DIMS = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)
FAMILIES = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "gemma": "GemmaConfig",
            "phi3": "Phi3Config"}
ACTIVATIONS = {"gemma": "gelu_pytorch_tanh"}


def _hf_default(family: str, key: str):
    import transformers

    return getattr(getattr(transformers, FAMILIES[family])(), key)


def _config(family: str, **extra):
    model_type = MODEL_FAMILIES[family].hf_model_type
    return dict(DIMS, model_type=model_type, hidden_act=ACTIVATIONS.get(family, "silu"), **extra)


def _built(family: str, config):
    with torch.device("meta"):
        return family_of(config).build(config, 64, None)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_config_without_rms_norm_eps_gets_transformers_default(family):
    config = _config(family, tie_word_embeddings=MODEL_FAMILIES[family].tied_default)
    model = _built(family, config)
    eps = {m.eps for m in model.modules() if type(m).__name__.endswith("RMSNorm")}
    assert eps == {_hf_default(family, "rms_norm_eps")}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_config_without_rope_theta_gets_transformers_base(family):
    config = _config(family, tie_word_embeddings=MODEL_FAMILIES[family].tied_default)
    model = _built(family, config)
    bases = {float(m.pos_embeddings.base) for m in model.modules() if getattr(m, "pos_embeddings", None) is not None}
    assert bases == {float(_hf_default(family, "rope_parameters")["rope_theta"])}


@pytest.mark.parametrize("family", ["qwen2", "gemma"])
def test_a_config_without_tie_word_embeddings_is_tied_as_transformers_ties_it(family):
    from torchtune.modules import TiedLinear

    model = _built(family, _config(family))
    tied = isinstance(model.output, TiedLinear) or "output.weight" not in dict(model.named_parameters())
    assert tied is bool(_hf_default(family, "tie_word_embeddings"))


def test_a_tied_llama_folder_that_stores_lm_head_converts_to_the_tied_models_keys():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = _config("llama", tie_word_embeddings=True, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(**config))
    sd = {k: v.clone() for k, v in hf.state_dict().items()}
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"].clone()  # a hub folder may keep the tied copy
    family = family_of(config)
    assert family.name == "llama_tied"
    tune = family.hf_to_tune(sd, config)
    assert set(tune) == set(family.build(config, 64, None).state_dict())


@pytest.mark.parametrize("top, inside", [(0.5, None), (None, 0.75), (1.0, 0.75), (0.5, 0.75)])
def test_partial_rotation_is_read_where_transformers_reads_it(top, inside):
    from transformers import Phi3Config

    from torchtune_longshort.models.family_builders import partial_rotary_factor

    entry = {"rope_type": "default", "rope_theta": 10000.0}
    if inside is not None:
        entry["partial_rotary_factor"] = inside
    config = _config("phi3", rope_parameters=entry, **({} if top is None else {"partial_rotary_factor": top}))
    hf = Phi3Config.from_dict(dict(config)).rope_parameters.get("partial_rotary_factor", 1.0)
    assert partial_rotary_factor(config) == hf


@pytest.mark.parametrize("factors", [3, 4])
def test_longrope_factors_of_a_partly_rotated_head_are_accepted_as_transformers_accepts_them(factors):
    from transformers import Phi3Config

    from torchtune_longshort.models.hf_rope import rope_spec_from_hf_config

    # head_dim 8, 3/4 rotated: 6 dimensions, 3 pairs; transformers validates the factors' length against them
    entry = {"type": "longrope", "short_factor": [1.0] * factors, "long_factor": [2.0] * factors,
             "partial_rotary_factor": 0.75}
    config = _config("phi3", max_position_embeddings=256, original_max_position_embeddings=64, rope_scaling=entry)
    try:
        Phi3Config(**config)
        hf_accepts = True
    except Exception:  # transformers 5: huggingface_hub's StrictDataclassClassValidationError, no ValueError
        hf_accepts = False
    try:
        rope_spec_from_hf_config(config)
        ours_accepts = True
    except ValueError:
        ours_accepts = False
    assert ours_accepts is hf_accepts


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_config_without_num_key_value_heads_gets_transformers_kv_heads(family):
    import transformers

    # 64 heads of 8 dimensions: transformers' defaults (Mistral 8, Qwen2 32, Gemma 16) each divide them, none is 64
    config = {k: v for k, v in _config(family, tie_word_embeddings=MODEL_FAMILIES[family].tied_default).items()
              if k != "num_key_value_heads"}
    config.update(hidden_size=512, num_attention_heads=64)
    hf = getattr(transformers, FAMILIES[family])(**config).num_key_value_heads
    model = _built(family, config)
    assert {layer.attn.num_kv_heads for layer in model.layers} == {hf}
    hf_sd = family_of(config).tune_to_hf(model.state_dict(), config)  # the weight conversion reads the same heads
    rows = {k.split(".")[-2]: v.shape[0] for k, v in hf_sd.items() if k.startswith("model.layers.0.self_attn.")}
    assert rows.get("k_proj", rows.get("qkv_proj", 0) - 64 * 8) == hf * 8 * (1 if "k_proj" in rows else 2)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_head_count_that_does_not_divide_transformers_default_width_still_gets_its_defaults(family):
    """SmolLM2-135M's 9 heads do not divide the 4096 width transformers' classes default to: asking the class with
    the heads alone raised 'The hidden size (4096) is not a multiple of the number of attention heads (9)' for a
    config.json that leaves num_key_value_heads or rms_norm_eps out. Reference: transformers' class built from the
    whole config.json."""
    import transformers

    from torchtune_longshort.models.family_builders import kv_heads, norm_eps

    config = {k: v for k, v in _config(family, tie_word_embeddings=MODEL_FAMILIES[family].tied_default).items()
              if k != "num_key_value_heads"}
    config.update(hidden_size=72, num_attention_heads=9)
    hf = getattr(transformers, FAMILIES[family])(**config)
    assert kv_heads(config) == hf.num_key_value_heads
    assert norm_eps(config, 0.5) == hf.rms_norm_eps
