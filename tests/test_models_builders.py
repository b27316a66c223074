"""One way to build a model: every shipped config's ``model`` is ``hf_decoder`` (optionally inside ``rope_scaled``),
built by the family table from a ``config.json`` -- a checkpoint folder's, or the one the family writes from
torchtune's dimension keywords for random weights (the same one the recipe writes as ``step_0``).

References: torchtune's own ``llama2`` / ``lora_llama2`` builders (the same parameters for the same seed), the
published Llama-2-7B parameter count, and the checkpoint folder read back by the project's loader."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torchtune import config as tt_config

from torchtune_longshort.models import CheckpointFolder, decoder_config, hf_decoder, load_hf_checkpoint

REPO = Path(__file__).resolve().parents[1]
HF_DECODER = "torchtune_longshort.models.hf_decoder"
ROPE_SCALED = "torchtune_longshort.models.rope_scaled"
DIMS = dict(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=64)


def _model_nodes(cfg: dict):
    """``(where, node)`` of every model node a shipped config builds: the recipe's ``model`` and a study's, through
    ``rope_scaled``'s nested ``model``."""
    node, where = cfg.get("model"), "model"
    while isinstance(node, dict):
        yield where, node
        node, where = node.get("model"), f"{where}.model"


def test_every_shipped_config_builds_through_the_family_table():
    """A new config cannot bypass the table: each model node is ``rope_scaled`` around ``hf_decoder`` (or
    ``hf_decoder`` alone), which names a checkpoint folder or a family of the table."""
    from torchtune_longshort.models import MODEL_FAMILIES

    seen = 0
    for path in sorted((REPO / "configs").rglob("*.yaml")):
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        nodes = list(_model_nodes(cfg))
        if not nodes:
            continue
        name = path.relative_to(REPO / "configs")
        *wrappers, (where, inner) = nodes
        assert all(n["_component_"] == ROPE_SCALED for _, n in wrappers), f"{name}: {[n for _, n in wrappers]}"
        assert inner["_component_"] == HF_DECODER, f"{name}: {where} builds {inner['_component_']}"
        assert ("checkpoint_dir" in inner) != ("family" in inner), f"{name}: {where} names no single source"
        assert inner.get("family", "llama") in MODEL_FAMILIES, name
        seen += 1
    assert seen >= 20  # every recipe config and every study config with a model node


def test_random_weights_are_torchtunes_own_builders_for_the_same_seed():
    from torchtune.models.llama2 import llama2, lora_llama2

    lora = dict(lora_attn_modules=["q_proj", "v_proj"], apply_lora_to_mlp=True, lora_rank=4, lora_alpha=8)
    for theirs, ours in ((lambda: llama2(**DIMS), lambda: hf_decoder(family="llama", **DIMS)),
                         (lambda: lora_llama2(**lora, **DIMS), lambda: hf_decoder(family="llama", **lora, **DIMS))):
        torch.manual_seed(0)
        a = theirs().state_dict()
        torch.manual_seed(0)
        b = ours().state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_llama2_7b_from_its_dimensions_has_the_published_parameter_count():
    with torch.device("meta"):
        m = hf_decoder(family="llama", vocab_size=32_000, num_layers=32, num_heads=32, embed_dim=4096,
                       intermediate_dim=11008, max_seq_len=4096)
    assert sum(p.numel() for p in m.parameters()) == 6_738_415_616


@pytest.mark.parametrize("node, match", [
    ({}, r"model: give checkpoint_dir \(a checkpoint folder\) or family"),
    ({"checkpoint_dir": "/x", "num_layers": 2}, r"checkpoint_dir='/x' reads the family and dimensions .* drop "
                                                r"model.num_layers"),
    ({"family": "llamma", **DIMS}, r"model.family='llamma' is not a model family: expected one of \['llama'"),
    ({"family": "mistral", **DIMS}, r"model.family='mistral': random weights from dimensions are written for "
                                    r"\['llama', 'llama_tied'\] only"),
    ({"family": "llama", "vocab_size": 64}, r"missing \['num_layers', 'num_heads', 'embed_dim', 'max_seq_len'\]"),
])
def test_a_model_node_without_one_source_is_refused_in_one_line(node, match):
    with pytest.raises(ValueError, match=match):
        hf_decoder(**node)


def test_step_0_config_json_is_what_the_family_builds_from(tmp_path, sp_tokenizer_dir):
    """The recipe's ``step_0`` from random weights: its config.json is the family's for the node's dimensions, and
    the folder loads back into the same model (same shapes, same weights) by the family table."""
    from torchtune_longshort.training.checkpointing import StepCheckpoints
    from torchtune_longshort.training.recipe_checkpoints import write_scratch_start
    from torchtune_longshort.training.recipe_config import load_recipe_config

    cfg = OmegaConf.load(REPO / "configs" / "tiny" / "longshort_stdlib.yaml")
    cfg.output_dir, cfg.tokenizer.path = str(tmp_path / "out"), str(sp_tokenizer_dir)
    cfg.validation, cfg.seq_len = None, 64
    for k, v in dict(num_layers=2, embed_dim=64, intermediate_dim=None, max_seq_len=128).items():
        cfg.model[k] = v
    config = load_recipe_config(cfg)
    ckpts = StepCheckpoints(tmp_path / "out")
    write_scratch_start(config, 3, ckpts)
    folder = CheckpointFolder.open(ckpts.path(0))
    node = OmegaConf.to_container(cfg.model)
    expected = decoder_config(node)
    assert {k: folder.config[k] for k in expected} == expected and folder.family.name == "llama"
    torch.manual_seed(3)
    built = tt_config.instantiate(cfg.model).state_dict()
    loaded = load_hf_checkpoint(folder).state_dict()
    assert {k: v.shape for k, v in built.items()} == {k: v.shape for k, v in loaded.items()}
    assert all(torch.equal(built[k], loaded[k]) for k in built)


@pytest.fixture(scope="module")
def qlora_base(tmp_path_factory):
    """A Llama-2-shaped checkpoint NF4 can quantize (every weight's numel a multiple of 64 x 256), 32 positions."""
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    return write_random_llama2_checkpoint(tmp_path_factory.mktemp("qlora_base"), vocab_size=64, embed_dim=128,
                                          num_layers=2, num_heads=4, num_kv_heads=4, intermediate_dim=256,
                                          max_seq_len=32)


def test_longqlora_config_is_pi_nf4_lora_all_linears_and_s2_attn(qlora_base):
    """The shipped LongQLoRA config (Yang 2023) on a small Llama-2 folder: PI at ceil(L'/L), NF4 with
    double-quantized scales, LoRA r=64 / alpha=16 / dropout 0.05 on every linear but the output, S2-Attn at 1/4 of
    the length; the recipe's LongQLoRA trainable set (adapters, embeddings, norms) trains through NF4 and S2-Attn."""
    from torchao.dtypes.nf4tensor import NF4Tensor
    from torchtune.modules.peft import LoRALinear, get_adapter_params

    from torchtune_longshort.training.model_setup import LoRAInfo, set_trainable

    cfg = OmegaConf.load(REPO / "configs" / "llama2_7b" / "longqlora_8k_redpajama_book.yaml")
    cfg.checkpoint_dir, cfg.model.max_seq_len = str(qlora_base), 64  # 32 -> 64: factor 2 as 4096 -> 8192
    m = tt_config.instantiate(cfg.model)
    spec = m.rope_scaling
    assert spec["method"] == "linear" and spec["factor"] == math.ceil(64 / spec["original_max_seq_len"]) == 2
    attn, mlp = m.layers[0].attn, m.layers[0].mlp
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.output_proj, mlp.w1, mlp.w2, mlp.w3):
        assert isinstance(proj, LoRALinear)
        assert proj.rank == 64 and proj.alpha == 16 and proj.dropout.p == pytest.approx(0.05)
        assert isinstance(proj.weight, NF4Tensor)
        # Double quantization: the per-block scales are themselves quantized (int8 + one scale per block).
        assert proj.weight.quantized_scalers.dtype == torch.int8
    assert not isinstance(m.output, LoRALinear)
    assert m.s2_attn == {"group_size": None, "group_size_ratio": 0.25}

    info = LoRAInfo(rank=64, alpha=16)
    set_trainable(m, info, train_embeddings_and_norms=cfg.train_embeddings_and_norms)
    extra = set(info.trainable_names) - set(get_adapter_params(m))
    assert "tok_embeddings.weight" in extra and "norm.scale" in extra and "layers.0.sa_norm.scale" in extra
    assert m.tok_embeddings.weight.requires_grad and not m.output.weight.requires_grad
    m.train()  # a training step on CPU through NF4 base weights and S2-Attn (64 tokens: groups of 16)
    m(torch.randint(0, 64, (1, 64))).float().logsumexp(-1).mean().backward()
    assert m.layers[0].attn.q_proj.lora_b.weight.grad.abs().sum() > 0 and m.output.weight.grad is None


@pytest.mark.parametrize("config, field", [("tiny/lora_from_checkpoint.yaml", "model.use_dora"),
                                           ("smollm2_135m/lora_yarn_16k_stdlib.yaml", "model.model.use_dora")])
def test_dora_is_refused_by_the_config_check_naming_the_field(config, field):
    """DoRA (torchtune's use_dora) would train from a magnitude vector never set from the loaded weights (torch.empty;
    the tiny LoRA config's first loss was NaN) and could not be saved: the config check refuses it, at any depth."""
    from torchtune_longshort.training.recipe_config import load_recipe_config

    cfg = OmegaConf.load(REPO / "configs" / config)
    OmegaConf.update(cfg, field, True)
    with pytest.raises(ValueError, match=rf"^{field}=True is not accepted: this recipe trains LoRA adapters.*"
                                         rf"set {field}=False$"):
        load_recipe_config(cfg, world_size=1, local=False)
    OmegaConf.update(cfg, field, False)
    load_recipe_config(cfg, world_size=1, local=False)


@pytest.mark.parametrize("family_type, kv_heads, apply_to_output, refused", [
    ("qwen2", 2, False, ("k_proj", "v_proj")),  # 2 KV heads x 32 x 128 = 8192 values
    ("qwen2", 4, False, ()),
    ("llama", 4, True, ("output",)),            # 80 x 128 = 10240 values
    ("llama", 4, False, ()),                    # an output without LoRA is not quantized
])
def test_qlora_weights_nf4_cannot_quantize_are_refused_before_the_build(family_type, kv_heads, apply_to_output,
                                                                        refused):
    """QLoRA of a checkpoint whose projections NF4 cannot quantize (numel not a multiple of 64 x 256): torchao's
    ``AssertionError: Number of scalers must be divisible by scaler block size, got 128 ...`` came out of torchtune's
    LoRALinear as a traceback (a tiny tied Qwen2, 4 heads / 2 KV heads, hidden 128), where the README promised a
    check before loading. Reference: torchao's own to_nf4 on a weight of each refused / accepted shape."""
    from torchao.dtypes.nf4tensor import to_nf4

    from torchtune_longshort.models.families import family_of
    from torchtune_longshort.models.family_builders import UnsupportedModelError, nf4_weight_shapes

    config = {"model_type": family_type, "vocab_size": 80, "hidden_size": 128, "intermediate_size": 256,
              "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": kv_heads,
              "tie_word_embeddings": False}
    lora = dict(lora_attn_modules=["q_proj", "v_proj"], apply_lora_to_mlp=True, apply_lora_to_output=apply_to_output,
                lora_rank=4, lora_alpha=8, quantize_base=True)
    family = family_of(config)
    shapes = nf4_weight_shapes(config, lora)
    for name, shape in shapes.items():  # the rule is torchao's
        fits = True
        try:
            to_nf4(torch.randn(shape))
        except AssertionError:
            fits = False
        assert fits == (name not in refused), (name, shape)
    if not refused:
        family.decoder(config, 64, lora)
        return
    with pytest.raises(UnsupportedModelError, match=rf"quantize_base=True.*{refused[0]}.*quantize_base: False"):
        family.decoder(config, 64, lora)


def test_a_rope_given_with_a_factor_and_no_length_scales_to_factor_times_the_pretrained_length(tiny_llama2_dir):
    # `load_hf_checkpoint(folder, rope={"method": "linear", "factor": 2})` (the README's line) compressed the
    # positions but kept the pre-trained 256 positions: a 300-token input was refused. The reference: the same
    # scaling given its length explicitly. A method's name alone (factor max_seq_len / 256 = 1) scaled nothing.
    import torch

    got = load_hf_checkpoint(tiny_llama2_dir, rope={"method": "linear", "factor": 2})
    want = load_hf_checkpoint(tiny_llama2_dir, rope={"method": "linear", "factor": 2}, max_seq_len=512)
    assert got.max_seq_len == 512 and got.rope_scaling == want.rope_scaling
    tokens = torch.randint(0, 512, (1, 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(got(tokens), want(tokens))
    with pytest.raises(ValueError, match=r"^rope='yarn' with no max_seq_len and no factor scales nothing .*pass "
                                         r"max_seq_len=<the target length>, or a factor"):
        load_hf_checkpoint(tiny_llama2_dir, rope="yarn")
    assert load_hf_checkpoint(tiny_llama2_dir, rope="yarn", max_seq_len=1024).rope_scaling["factor"] == 4.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_seq_len=0), r"^max_seq_len=0 must be an int >= 1"),  # was the default, silently
    (dict(max_seq_len=1024.5), r"^max_seq_len=1024.5 must be an int >= 1"),  # was model.max_seq_len = 1024.5
    (dict(max_seq_len="1k"), r"^max_seq_len='1k' must be an int >= 1"),
    (dict(dtype="bfloat16"), r"^dtype='bfloat16' is not a torch.dtype"),
    (dict(device="cpux"), r"^device='cpux': not a device name"),
    (dict(rope={"method": "linear", "factor": "2"}), r"^rope: factor='2' is not a number"),
    (dict(rope={"method": "linear", "factor": 2}, plain_rope=True), r"plain_rope=True ask for two things"),
])
def test_load_hf_checkpoint_refuses_bad_arguments_in_one_line(tiny_llama2_dir, kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_hf_checkpoint(tiny_llama2_dir, **kwargs)


# The real bases of the shipped GPU configs: their Hugging Face config.json as published (the model repos
# meta-llama/Llama-2-7b-hf, meta-llama/Meta-Llama-3-8B, meta-llama/Llama-3.1-8B, mistralai/Mistral-7B-v0.1,
# Qwen/Qwen2.5-7B, google/gemma-2b, microsoft/Phi-3-mini-4k-instruct, microsoft/Phi-3.5-mini-instruct,
# HuggingFaceTB/SmolLM2-135M-Instruct; LongRoPE's factor values elided, 48 of each as published), the torchtune
# 0.6.1 builder with the same dimensions (the independent parameter count), and the length each was pre-trained at,
# which the config's RoPE scaling must start from: Mistral-7B's paper gives 8192 (config.json: 32768), Qwen2.5's
# model card 32768 (the base's config.json: 131072), Llama-3.1's rope_scaling 8192.
_LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu", tie_word_embeddings=False)
_L3 = dict(_LLAMA, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
           num_hidden_layers=32, rms_norm_eps=1e-5, rope_theta=500000.0, vocab_size=128256)
_PHI3 = dict(architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_act="silu", hidden_size=3072,
             intermediate_size=8192, num_attention_heads=32, num_key_value_heads=32, num_hidden_layers=32,
             original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, vocab_size=32064,
             tie_word_embeddings=False, bos_token_id=1, eos_token_id=32000, pad_token_id=32000)
PUBLISHED = {
    "llama2_7b": (dict(_LLAMA, hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                       num_key_value_heads=32, num_hidden_layers=32, max_position_embeddings=4096, rms_norm_eps=1e-5,
                       vocab_size=32000), "llama2.llama2_7b", 4096),
    "llama3_8b": (dict(_L3, max_position_embeddings=8192), "llama3.llama3_8b", 8192),
    "llama3_1_8b": (dict(_L3, max_position_embeddings=131072, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=8192)), "llama3.llama3_8b", 8192),
    "mistral_7b": (dict(architectures=["MistralForCausalLM"], model_type="mistral", hidden_act="silu",
                        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                        num_hidden_layers=32, max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=10000.0,
                        sliding_window=4096, vocab_size=32000, tie_word_embeddings=False), "mistral.mistral_7b", 8192),
    "qwen2_5_7b": (dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu", hidden_size=3584,
                        intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4, num_hidden_layers=28,
                        max_position_embeddings=131072, max_window_layers=28, rms_norm_eps=1e-6,
                        rope_theta=1000000.0, sliding_window=131072, use_sliding_window=False, vocab_size=152064,
                        tie_word_embeddings=False), "qwen2_5.qwen2_5_7b_base", 32768),
    "gemma_2b": (dict(architectures=["GemmaForCausalLM"], model_type="gemma", hidden_act="gelu", hidden_size=2048,
                      intermediate_size=16384, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                      num_hidden_layers=18, max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0,
                      vocab_size=256000), "gemma.gemma_2b", 8192),
    "phi3_mini_4k": (dict(_PHI3, max_position_embeddings=4096, sliding_window=2047), "phi3.phi3_mini", 4096),
    "phi3_5_mini": (dict(_PHI3, max_position_embeddings=131072, sliding_window=262144, rope_scaling=dict(
        type="longrope", short_factor=[1.0] * 48, long_factor=[1.5] * 48)), "phi3.phi3_mini", 4096),
    "smollm2_135m": (dict(_LLAMA, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                          num_key_value_heads=3, num_hidden_layers=30, max_position_embeddings=8192,
                          rms_norm_eps=1e-5, rope_theta=100000.0, vocab_size=49152, tie_word_embeddings=True),
                     134_515_008, 8192),
}
GPU_CONFIGS = [
    ("llama2_7b/clex_4k_pg19.yaml", "llama2_7b"), ("llama2_7b/clex_4k_redpajama_book.yaml", "llama2_7b"),
    ("llama2_7b/eabf_8k_redpajama_book.yaml", "llama2_7b"), ("llama2_7b/longqlora_8k_redpajama_book.yaml", "llama2_7b"),
    ("llama3_8b/eabf_16k_redpajama_book.yaml", "llama3_8b"), ("llama3_8b/eabf_16k_redpajama_book.yaml", "llama3_1_8b"),
    ("mistral_7b/eabf_16k_redpajama_book.yaml", "mistral_7b"),
    ("qwen2_5_7b/yarn_64k_redpajama_book.yaml", "qwen2_5_7b"),
    ("gemma_2b/pi_16k_redpajama_book.yaml", "gemma_2b"), ("phi3_mini_4k/yarn_16k_redpajama_book.yaml", "phi3_mini_4k"),
    ("phi3_5_mini/longrope_16k_redpajama_book.yaml", "phi3_5_mini"),
    ("smollm2_135m/yarn_16k_stdlib.yaml", "smollm2_135m"), ("smollm2_135m/lora_yarn_16k_stdlib.yaml", "smollm2_135m"),
]


@pytest.mark.parametrize("name, base", GPU_CONFIGS, ids=[f"{c}-{b}" for c, b in GPU_CONFIGS])
def test_gpu_config_builds_its_real_base_as_published_and_extends_it(tmp_path, name, base):
    """Each shipped config for a real base, on the base's published config.json, built on the meta device: the
    shape config.json gives, torchtune's own builder's parameter count, and a RoPE scaling that starts from the
    length the base was pre-trained at and covers more than it (and the windows)."""
    import importlib
    import json

    from torchtune_longshort.rope import ROPE_METHODS

    hf, reference, trained = PUBLISHED[base]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    header = json.dumps({"__metadata__": {"format": "pt"}}).encode()  # a weight file the folder check finds
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    cfg = OmegaConf.load(REPO / "configs" / name)
    cfg.checkpoint_dir = str(tmp_path)
    inner = cfg.model.get("model", cfg.model)
    if inner.get("quantize_base"):
        inner.quantize_base = False  # NF4 on the meta device takes seconds; the shapes are the same
    with torch.device("meta"):
        m = tt_config.instantiate(cfg.model)
        if isinstance(reference, str):
            module, builder = reference.rsplit(".", 1)
            reference = sum(p.numel() for p in getattr(importlib.import_module(f"torchtune.models.{module}"),
                                                        builder)().parameters())
    attn = m.layers[0].attn
    head_dim = hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"])
    assert (len(m.layers), attn.num_heads, attn.num_kv_heads, attn.head_dim, attn.embed_dim,
            m.tok_embeddings.num_embeddings) == (hf["num_hidden_layers"], hf["num_attention_heads"],
                                                 hf["num_key_value_heads"], head_dim, hf["hidden_size"],
                                                 hf["vocab_size"])
    assert m.norm.eps == pytest.approx(hf["rms_norm_eps"])
    assert attn.pos_embeddings.base == hf.get("rope_theta", 10000.0)
    assert (type(m.output).__name__ == "TiedLinear") == hf.get("tie_word_embeddings", hf["model_type"] == "gemma")
    own = sum(p.numel() for n, p in m.named_parameters() if "lora_" not in n and "pos_embeddings" not in n)
    assert own == reference
    spec = m.rope_scaling
    assert spec["original_max_seq_len"] == trained, spec
    method = ROPE_METHODS[spec["method"]]  # a method with no scale parameter (EABF): the length it was built for
    covered = method.covered_length(spec, trained) if method.scale_parameter else spec["max_seq_len"]
    assert covered > trained and covered >= cfg.seq_len and m.max_seq_len >= covered, spec
