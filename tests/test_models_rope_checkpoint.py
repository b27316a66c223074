"""apply_rope_scaling's models as Hugging Face checkpoints: each method's scaling saved and loaded back (the round
trip against the model before it), and Python callers refusing a scaling start past the checkpoint's positions.
Split from test_models_rope_scaling.py."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from test_models_rope_scaling import ORIG, TARGET, VOCAB

from torchtune_longshort.models import (
    apply_rope_scaling,
    load_hf_checkpoint,
    rope_scaling_to_hf,
    rope_spec_from_hf_config,
    save_hf_checkpoint,
    write_random_llama2_checkpoint,
)


def test_python_callers_refuse_a_scaling_start_past_the_checkpoint(tiny_llama2_dir, sp_tokenizer_dir,
                                                                  tmp_path):
    """An hf_decoder built past its folder's 256 positions, then scaled: the scaling started from the built length
    (YaRN factor 512/512 = 1, no scaling) without a word from Python; only the config check refused it. Now the
    builders refuse it, naming the argument and both fixes, and a rope_scaled target short of its start too."""
    from torchtune_longshort.models import hf_decoder, rope_scaled

    d = str(tiny_llama2_dir)
    said = (r"^hf_decoder's max_seq_len=512 under {0} is the length the scaling starts from \(yarn factor 512/512 = 1 "
            r"where {0}'s max_seq_len is the target\), past the 256 positions the checkpoint was trained at .*: drop "
            r"hf_decoder's max_seq_len \(or pass original_max_seq_len to {0} to mean another start\)$")
    node = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": d, "max_seq_len": 512}
    for caller, scale in (("rope_scaled", lambda m: rope_scaled(m, "yarn", 512)),
                          ("apply_rope_scaling", lambda m: apply_rope_scaling(m, "yarn", 512))):
        with pytest.raises(ValueError, match=said.format(caller)):
            scale(hf_decoder(checkpoint_dir=d, max_seq_len=512))
    with pytest.raises(ValueError, match=said.format("rope_scaled")):
        rope_scaled(node, "yarn", 512)  # the config node form, from Python
    # the two fixes the message names: the factor is the independent 512/256
    assert rope_scaled(hf_decoder(checkpoint_dir=d), "yarn", 512).rope_scaling["factor"] == 2
    assert rope_scaled(hf_decoder(checkpoint_dir=d, max_seq_len=512), "yarn", 512,
                       original_max_seq_len=256).rope_scaling["factor"] == 2
    # a shorter start is a choice; once scaled, a model's own start is its record (re-scaling is not refused)
    assert rope_scaled(hf_decoder(checkpoint_dir=d, max_seq_len=128), "yarn", 512).rope_scaling["factor"] == 4
    model = apply_rope_scaling(hf_decoder(checkpoint_dir=d, max_seq_len=512), "yarn", 512, original_max_seq_len=256)
    assert apply_rope_scaling(model, "yarn", 1024).rope_scaling["factor"] == 4
    # rope_scaled's target short of its start, with a factor: a model covering 128 of its 256 positions, silently
    with pytest.raises(ValueError, match=r"^max_seq_len=128 is shorter than the 256 positions the scaling starts "
                                         r"from: the scaled model would cover fewer .*give max_seq_len >= 256"):
        rope_scaled(hf_decoder(checkpoint_dir=d), "yarn", 128, factor=2)
    # apply_rope_scaling takes it: a scaled checkpoint loaded for a shorter run keeps its factor
    assert apply_rope_scaling(hf_decoder(checkpoint_dir=d), "yarn", 128, factor=2).max_seq_len == 128
    # a folder with its own scaling (YaRN 256 -> 512) is re-scaled from its pre-trained 256 whatever length
    # hf_decoder built it at: not refused, by the builders or by the config check (it said "the length the scaling
    # starts from" of 1024, and measured a target against it)
    from torchtune_longshort.training.recipe_config.rope_node import check_rope_node

    scaled = str(save_hf_checkpoint(apply_rope_scaling(load_hf_checkpoint(d), "yarn", 512), tmp_path / "yarn", d,
                                    tokenizer=sp_tokenizer_dir))
    assert rope_scaled(hf_decoder(checkpoint_dir=scaled, max_seq_len=1024), "yarn", 1024).rope_scaling["factor"] == 4
    for target in (1024, 384):
        check_rope_node("model", {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarn",
                                  "max_seq_len": target, "model": {**node, "checkpoint_dir": scaled,
                                                                   "max_seq_len": 1024}})
    with pytest.raises(ValueError, match=r"^model.max_seq_len=128 is shorter than the 256 positions.*give "
                                         r"model.max_seq_len >= 256 \(the target length\), or "
                                         r"model.original_max_seq_len=<the length the model was pre-trained at>"):
        check_rope_node("model", {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarn",
                                  "max_seq_len": 128, "model": {**node, "checkpoint_dir": scaled, "max_seq_len": 1024}})


HF_METHODS = ["linear", "dynamic_ntk", "yarn", "llama3", "ntk", "abf"]


@pytest.fixture(scope="module")
def small_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("rt_src")
    write_random_llama2_checkpoint(d, vocab_size=VOCAB, embed_dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
                                   intermediate_dim=128, max_seq_len=ORIG, seed=3)
    return d


def _sharpen(model):
    with torch.no_grad():
        for layer in model.layers:
            layer.attn.q_proj.weight.mul_(6)
            layer.attn.k_proj.weight.mul_(6)


@pytest.mark.parametrize("method", HF_METHODS + ["eabf", "clex"])
def test_checkpoint_round_trip(tmp_path, small_ckpt, sp_tokenizer_dir, method):
    from transformers import LlamaForCausalLM

    model = load_hf_checkpoint(small_ckpt, plain_rope=True)
    _sharpen(model)
    pretrained = copy.deepcopy(model)
    apply_rope_scaling(model, method, TARGET)
    if method == "clex":
        with torch.no_grad():
            model.layers[0].attn.pos_embeddings.ode_down_proj.normal_(std=0.05)
    out = save_hf_checkpoint(model, tmp_path / "out", small_ckpt, tokenizer=sp_tokenizer_dir)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["longshort_rope"]["method"] == method
    if method in HF_METHODS:
        assert cfg.get("rope_scaling") == rope_scaling_to_hf(model)
    else:  # transformers refuses the folder with the reason instead of running plain RoPE / ABF
        assert "not representable in transformers" in cfg["rope_scaling"]["rope_type"]
    tokens = torch.randint(0, VOCAB, (1, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(tokens)
        again = load_hf_checkpoint(out)(tokens)
    torch.testing.assert_close(again, ref, rtol=0, atol=1e-5)
    with torch.no_grad():  # plain_rope and a rope override start from the pre-trained RoPE (base and length), not
        # from the scaled one config.json holds (NTK and ABF write their base into rope_theta)
        plain = load_hf_checkpoint(out, plain_rope=True)
        assert plain.max_seq_len == ORIG
        torch.testing.assert_close(plain(tokens[:, :ORIG]), pretrained(tokens[:, :ORIG]), rtol=0, atol=1e-5)
        linear = apply_rope_scaling(copy.deepcopy(pretrained), "linear", 2 * ORIG, factor=2.0)
        torch.testing.assert_close(load_hf_checkpoint(out, rope={"method": "linear", "factor": 2})(tokens[:, :64]),
                                   linear(tokens[:, :64]), rtol=0, atol=1e-5)
    if method in HF_METHODS:
        hf = LlamaForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
        with torch.no_grad():
            torch.testing.assert_close(hf(tokens).logits, ref, rtol=0, atol=1e-4)
        # Without our own key, the transformers entries alone rebuild the same model.
        stripped = {k: v for k, v in cfg.items() if k != "longshort_rope"}
        spec = rope_spec_from_hf_config(stripped)
        assert (spec is None) == (method in ("ntk", "abf"))  # those two are a rope_theta change
        (out / "config.json").write_text(json.dumps(stripped))
        with torch.no_grad():
            torch.testing.assert_close(load_hf_checkpoint(out, max_seq_len=TARGET)(tokens), ref, rtol=0, atol=1e-4)
    if method == "clex":
        assert (out / "longshort_rope" / "rope_params.safetensors").is_file()
        # evaluated at fewer positions than it was trained over (below original x t_max): refused before, now the
        # trained module with t from the length, the logits of the model it saved
        with torch.no_grad():
            short = load_hf_checkpoint(out, max_seq_len=tokens.shape[1])(tokens)
        torch.testing.assert_close(short, ref, rtol=0, atol=1e-5)
