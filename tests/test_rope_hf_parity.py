"""Parity of our scaled-RoPE torchtune models with transformers' LlamaForCausalLM (5.23) on the same weights.

Both sides are built from one random HF checkpoint (written by transformers, loaded into torchtune through
torchtune's own q/k permutation). q/k weights are sharpened so that attention depends strongly on position:
with transformers' default init (std 0.02) attention is nearly uniform and a wrong RoPE would hardly show.
Tolerance: 1e-4 absolute on float32 logits, at 200 tokens, beyond the original 64-token context.
"""

from __future__ import annotations

import pytest
import torch
from family_checkpoints import PHI3_5_LONG, PHI3_5_SHORT

from torchtune_longshort.models import load_hf_checkpoint, write_random_llama2_checkpoint

VOCAB = 128
ORIG = 64
TARGET = 256
SEQ = 200
ATOL = 1e-4

CASES = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG},
    "llama3": {
        "rope_type": "llama3",
        "factor": 4.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": ORIG,
    },
    # head_dim 16: 8 divisors each; the Phi-3 layout and both sides of its switch: tests/test_rope_longrope.py
    "longrope": {"rope_type": "longrope", "short_factor": PHI3_5_SHORT, "long_factor": PHI3_5_LONG,
                 "original_max_position_embeddings": ORIG},
}


def sharp_checkpoint(path, rope_scaling, max_pos, qk_gain=6.0, seed=0):
    """A random HF Llama checkpoint whose q/k projections are scaled up (position-sensitive attention)."""
    from transformers import LlamaForCausalLM

    write_random_llama2_checkpoint(
        path, vocab_size=VOCAB, embed_dim=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_dim=128,
        max_seq_len=max_pos, rope_scaling=rope_scaling, seed=seed,
    )
    hf = LlamaForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.q_proj.weight.mul_(qk_gain)
            layer.self_attn.k_proj.weight.mul_(qk_gain)
    hf.save_pretrained(str(path))
    return hf.eval()


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_transformers_beyond_original_context(tmp_path, name):
    # transformers' dynamic NTK reads the original length from max_position_embeddings.
    max_pos = ORIG if name == "dynamic" else TARGET
    hf = sharp_checkpoint(tmp_path, CASES[name], max_pos)
    ours = load_hf_checkpoint(tmp_path, max_seq_len=TARGET)
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(tokens).logits
        got = ours(tokens)
        plain = load_hf_checkpoint(tmp_path, plain_rope=True, max_seq_len=TARGET)(tokens)
    err = (got - ref).abs().max().item()
    assert err < ATOL, f"{name}: max |logit diff| {err:.3g}"
    # The comparison is sensitive: unscaled RoPE on the same weights is far off beyond the original context.
    assert (plain - ref)[:, ORIG:].abs().max().item() > 100 * ATOL


@pytest.mark.parametrize("name", ["yarn", "llama3"])
def test_an_original_length_in_max_position_embeddings_covers_original_times_factor(tmp_path, name):
    # Qwen2.5's YaRN instructions add rope_scaling {factor 4, original_max_position_embeddings 32768} and keep
    # max_position_embeddings at 32768: the folder covers 4 x 32768 (as transformers runs it), not 32768.
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    hf = sharp_checkpoint(tmp_path, CASES[name], ORIG)
    assert CheckpointFolder.open(tmp_path).usable_length == TARGET
    ours = load_hf_checkpoint(tmp_path)
    assert ours.max_seq_len == TARGET
    tokens = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (ours(tokens) - hf(tokens).logits).abs().max().item() < ATOL


@pytest.mark.parametrize("name, prompt_len", [("dynamic", 90), ("longrope", ORIG - 4)])
def test_length_dependent_rope_kv_decoding_matches_transformers_generate(tmp_path, name, prompt_len):
    """Dynamic NTK changes the base with every token past L, LongRoPE its factors once a call reaches past L (the
    prompt ends below it); cached keys keep theirs, in transformers' LlamaForCausalLM as here (its Phi-3 model
    recomputes the cache at L instead: docs/rope.md)."""
    from rope_helpers import greedy_kv

    hf = sharp_checkpoint(tmp_path, CASES[name], ORIG if name == "dynamic" else TARGET)
    ours = load_hf_checkpoint(tmp_path, max_seq_len=TARGET)
    prompt = torch.randint(0, VOCAB, (1, prompt_len), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = hf.generate(prompt, max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0,
                          return_dict_in_generate=True, output_logits=True)
    n = len(ref.logits)  # transformers stops at an EOS
    got, logits = greedy_kv(ours, prompt, 12)
    assert got[:n].tolist() == ref.sequences[0, prompt_len:].tolist()
    err = (logits[0, :n] - torch.stack(ref.logits, 1)[0]).abs().max().item()
    assert err < ATOL, f"{name}: max |step logit diff| {err:.3g}"


@pytest.mark.parametrize("entry, match", [
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 16},
     r"config.json: rope_scaling of rope type 'llama3' has no 'low_freq_factor' \(transformers' 'llama3' needs"),
    ({"rope_type": "yarn", "factor": "4x"}, r"config.json: rope_scaling \(rope type 'yarn', max_position_embeddings "
                                            r"64\): could not convert string to float: '4x'"),
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": float("inf")},
     r"config.json: rope_scaling \(rope type 'yarn'.*attention_factor=inf is not accepted"),
])
def test_a_hub_entry_that_cannot_build_is_refused_naming_the_entry(entry, match):
    # each ended in a bare KeyError / TypeError traceback, or a message naming neither the file nor the entry
    from torchtune_longshort.models.hf_rope import rope_spec_from_hf_config

    config = {"hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 64, "rope_scaling": entry}
    with pytest.raises(ValueError, match=match):
        rope_spec_from_hf_config(config)


# Real-size hub entries (head_dim 128): the tiny checkpoints above (head_dim 16, L = 64) put YaRN's whole ramp at
# dimension 0, so neither its default beta_fast / beta_slow nor the clamp of the ramp's top to head_dim - 1 showed.
HUB_ENTRIES = {
    "yarn_llama2_4k": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}, 16384, 1e4),
    "yarn_128k_ramp_past_half": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 131072},
                                 524288, 1e4),
    "yarn_betas_untruncated": ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
                                "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False}, 32768, 1e4),
    "yarn_attention_factor": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                               "attention_factor": 1.3}, 131072, 1e6),
    "linear": ({"rope_type": "linear", "factor": 2.5}, 4096, 1e4),
    "llama3_1": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}, 131072, 5e5),
}


@pytest.mark.parametrize("name", sorted(HUB_ENTRIES))
def test_frequencies_of_a_hub_entry_equal_transformers_rope_init_function(name):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from torchtune_longshort.models.hf_rope import rope_spec_from_hf_config
    from torchtune_longshort.rope import build_rope

    entry, max_pos, theta = HUB_ENTRIES[name]
    config = {"hidden_size": 512, "num_attention_heads": 4, "head_dim": 128, "max_position_embeddings": max_pos,
              "rope_parameters": {**entry, "rope_theta": theta}}
    want, want_scale = ROPE_INIT_FUNCTIONS[entry["rope_type"]](LlamaConfig(**config), "cpu")
    spec = rope_spec_from_hf_config(config)
    kwargs = {k: v for k, v in spec.items() if k not in ("method", "base", "max_seq_len")}
    rope = build_rope(spec["method"], head_dim=128, max_seq_len=8, base=spec["base"], **kwargs)
    torch.testing.assert_close(rope.theta, want.float(), rtol=1e-6, atol=0)
    assert rope.attention_scaling == pytest.approx(want_scale, rel=1e-12)


# 1, 4094, 4095: below the original length the plain base (a trigger of `length < L - 1` passed the others)
@pytest.mark.parametrize("length", [1, 4094, 4095, 4096, 4097, 10000])
def test_dynamic_ntk_base_at_a_length_equals_transformers_rope_init_function(length):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from torchtune_longshort.rope import build_rope
    from torchtune_longshort.rope.base import default_inv_freq

    config = LlamaConfig(hidden_size=512, num_attention_heads=4, head_dim=128, max_position_embeddings=4096,
                         rope_parameters={"rope_type": "dynamic", "factor": 3.0, "rope_theta": 1e4})
    want, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=length)
    rope = build_rope("dynamic_ntk", head_dim=128, max_seq_len=16384, factor=3.0, original_max_seq_len=4096)
    torch.testing.assert_close(default_inv_freq(128, rope.base_for_length(length)), want.float(), rtol=1e-5, atol=0)
