"""LongRoPE against transformers 5.23 (``rope_type: longrope``, the Phi-3 rotary embedding and ``Phi3ForCausalLM``) on
both sides of the switch length L = ``original_max_position_embeddings``: cos/sin, the attention factor, a tiny
Phi-3.5-layout model's logits (hub ``config.json`` spelling), our saved folder reloaded by transformers, and our
generation (``longshort``'s KV-cache greedy decoding, chunked prefill) against ``Phi3ForCausalLM.generate``. KV-cache
decoding that keeps its keys across L (``LlamaForCausalLM``): tests/test_rope_hf_parity.py. Bad input: factor lists of
the wrong length are refused with both numbers, before anything is built or written.

The model's q/k projections are sharpened so that attention depends strongly on position (with the default init it
is nearly uniform and a wrong RoPE would hardly show); each comparison also checks that the switch itself moves
transformers' output by far more than the tolerance, so a model that ignored it could not pass.
"""

from __future__ import annotations

import copy
import json
import math
import shutil

import pytest
import torch
from family_checkpoints import PHI3_5_LONG, PHI3_5_SHORT, phi3_5_rope_scaling

ORIG, TARGET, HEAD_DIM = 64, 256, 16
VOCAB = 512  # the shared SentencePiece tokenizer's (a saved folder carries the tokenizer)
ATOL = 1e-4
HUB_CONFIG = {  # Phi-3.5-mini-instruct's config.json, shrunk (its rope_scaling spelling, original length on top)
    "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "vocab_size": VOCAB, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": TARGET, "original_max_position_embeddings": ORIG, "rope_theta": 10000.0,
    "rope_scaling": phi3_5_rope_scaling(), "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
    "tie_word_embeddings": False,
}


def _hf_rotary(config: dict):
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    return Phi3RotaryEmbedding(Phi3Config(**config))


def _ours(config: dict):
    from torchtune_longshort.models.hf_rope import SPEC_CONTEXT_KEYS, rope_spec_from_hf_config
    from torchtune_longshort.rope import build_rope

    spec = rope_spec_from_hf_config(config)
    kwargs = {k: v for k, v in spec.items() if k not in SPEC_CONTEXT_KEYS}
    return build_rope("longrope", head_dim=HEAD_DIM, max_seq_len=TARGET, base=spec["base"], layout="half",
                      original_max_seq_len=spec["original_max_seq_len"], **kwargs)


def _theirs(rotary, positions: torch.Tensor):
    """transformers' cos/sin [b, s, d] as our [b, s, 1, d/2] (its halves are equal: ``cat(freqs, freqs)``)."""
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, positions)
    assert torch.equal(cos[..., : HEAD_DIM // 2], cos[..., HEAD_DIM // 2:])
    return cos[..., None, : HEAD_DIM // 2], sin[..., None, : HEAD_DIM // 2]


@pytest.mark.parametrize("attention_factor", [None, 1.3])
def test_cos_sin_match_transformers_on_both_sides_of_the_switch(attention_factor):
    config = json.loads(json.dumps(HUB_CONFIG))
    if attention_factor is not None:
        config["rope_scaling"]["attention_factor"] = attention_factor
    ours, rotary = _ours(config), _hf_rotary(config)
    s = TARGET / ORIG
    expected = attention_factor or math.sqrt(1 + math.log(s) / math.log(ORIG))  # the closed form, factor 4
    assert ours.attention_scaling == pytest.approx(expected, rel=1e-12) == rotary.attention_scaling
    worst = 0.0
    # Lengths below, at (short factors: the switch is strict) and past L; then one decoding step on each side.
    calls = [torch.arange(n)[None] for n in (ORIG // 2, ORIG, ORIG + 1, TARGET)]
    calls += [torch.tensor([[ORIG - 1]]), torch.tensor([[ORIG]]), torch.arange(2 * ORIG).view(2, ORIG)]
    for pos in calls:
        ref_cos, ref_sin = _theirs(rotary, pos)
        for input_pos in (pos, None if pos[0, 0] == 0 and pos.shape[0] == 1 else pos):
            cos, sin = ours.cos_sin(pos.shape[1], input_pos)
            worst = max(worst, (cos - ref_cos).abs().max().item(), (sin - ref_sin).abs().max().item())
    assert worst <= 1e-6, f"max |cos/sin diff| {worst:.3g}"
    # The switch is real: the first L positions get other angles once the call is one token longer.
    at, past = _theirs(rotary, torch.arange(ORIG)[None])[0], _theirs(rotary, torch.arange(ORIG + 1)[None])[0]
    assert (at - past[:, :ORIG]).abs().max().item() > 1e-2


def test_a_chunk_takes_the_factors_of_its_declared_sequence_and_the_cache_rule_is_phi3s():
    """Under ``sequence_length(n)`` a chunk gets the rows transformers computes for one call of n positions; a chunk
    reaching past n, or an n past the cache, is refused. ``kv_cache_stale`` is transformers' ``Phi3ForCausalLM``
    condition (input length >= L + 1 and cached length <= L, something cached); dynamic NTK keeps its cache."""
    from torchtune_longshort.rope import build_rope

    ours, rotary = _ours(HUB_CONFIG), _hf_rotary(HUB_CONFIG)
    chunk = torch.arange(ORIG // 2)[None]
    for n in (ORIG, ORIG + 1):
        ref_cos, ref_sin = _theirs(rotary, torch.arange(n)[None])
        with ours.sequence_length(n):
            cos, sin = ours.cos_sin(chunk.shape[1], chunk)
        assert torch.equal(cos, ref_cos[:, : ORIG // 2]) and torch.equal(sin, ref_sin[:, : ORIG // 2]), n
    per_call = ours.cos_sin(chunk.shape[1], chunk)[0]  # the chunk alone: short factors
    with ours.sequence_length(ORIG + 1):
        assert (ours.cos_sin(chunk.shape[1], chunk)[0] - per_call).abs().max().item() > 1e-2
        with pytest.raises(ValueError, match=r"input_pos reaches 65, past the sequence of 65 positions"):
            ours.cos_sin(2, torch.tensor([[64, 65]]))
    assert ours._sequence_length is None  # the block restores the per-call rule
    with pytest.raises(ValueError, match=r"sequence_length\(257\) exceeds this RoPE's max_seq_len=256"):
        with ours.sequence_length(TARGET + 1):
            pass
    pairs = [(c, n) for c in range(0, ORIG + 3) for n in range(c + 1, ORIG + 4)]
    assert [ours.kv_cache_stale(c, n) for c, n in pairs] == [0 < c <= ORIG < n for c, n in pairs]
    dynamic = build_rope("dynamic_ntk", head_dim=HEAD_DIM, max_seq_len=TARGET, factor=4.0, original_max_seq_len=ORIG)
    assert not any(dynamic.kv_cache_stale(c, n) for c, n in pairs)


def test_the_hub_spellings_read_alike():
    """Phi-3.5-mini's (``type``, original length on top), Phi-3-mini-128k's first (``type: su``) and transformers 5's
    (``rope_parameters`` with ``rope_type`` and the original length inside) give one spec; the top-level original
    length wins, as in transformers' Phi3Config."""
    from torchtune_longshort.models.hf_rope import rope_spec_from_hf_config

    hub = rope_spec_from_hf_config(HUB_CONFIG)
    assert hub["original_max_seq_len"] == ORIG and hub["factor"] == TARGET / ORIG and hub["max_seq_len"] == TARGET
    su = dict(HUB_CONFIG, rope_scaling={**phi3_5_rope_scaling(), "type": "su"})
    v5 = {k: v for k, v in HUB_CONFIG.items() if k not in ("rope_scaling", "rope_theta",
                                                            "original_max_position_embeddings")}
    v5["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": PHI3_5_SHORT,
                             "long_factor": PHI3_5_LONG, "original_max_position_embeddings": ORIG}
    top_wins = dict(HUB_CONFIG, rope_scaling={**phi3_5_rope_scaling(), "original_max_position_embeddings": 32})
    assert rope_spec_from_hf_config(su) == rope_spec_from_hf_config(v5) == rope_spec_from_hf_config(top_wins) == hub


def _sharp_phi3_checkpoint(path, tokenizer_dir, qk_gain=6.0, seed=0):
    """A random Phi-3.5-layout checkpoint (hub config.json spelling, a SentencePiece tokenizer) whose q/k rows are
    scaled up."""
    from family_checkpoints import as_hub_phi3_5_config
    from transformers import Phi3Config, Phi3ForCausalLM

    shutil.copytree(tokenizer_dir, path)
    torch.manual_seed(seed)
    hf = Phi3ForCausalLM(Phi3Config(**HUB_CONFIG)).eval()
    q_and_k = HUB_CONFIG["hidden_size"] + HUB_CONFIG["hidden_size"] // 2  # q rows, then k rows (2 of 4 heads)
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.qkv_proj.weight[:q_and_k].mul_(qk_gain)
    hf.save_pretrained(str(path))
    as_hub_phi3_5_config(path)
    return hf


@pytest.fixture(scope="module")
def sharp_phi3(tmp_path_factory, sp_tokenizer_dir):
    """(folder, transformers model) of :func:`_sharp_phi3_checkpoint`, shared by the tests that only read it."""
    path = tmp_path_factory.mktemp("phi3_5") / "src"
    return path, _sharp_phi3_checkpoint(path, sp_tokenizer_dir)


def test_phi3_logits_match_transformers_below_at_and_past_the_switch(tmp_path, sharp_phi3):
    """Our model on transformers' weights, and our saved folder reloaded by transformers, at L - 1 (short factors),
    L (short: the switch is strict), L + 1 and 200 tokens (long factors)."""
    from transformers import Phi3ForCausalLM

    from torchtune_longshort.models import load_hf_checkpoint, save_hf_checkpoint

    src, hf = sharp_phi3
    ours = load_hf_checkpoint(src)
    assert ours.rope_scaling["method"] == "longrope" and ours.rope_scaling["layout"] == "half"
    saved = Phi3ForCausalLM.from_pretrained(str(save_hf_checkpoint(ours, tmp_path / "out", src)),
                                            dtype=torch.float32).eval()
    tokens = torch.randint(0, VOCAB, (2, 200), generator=torch.Generator().manual_seed(1))
    refs = {}
    with torch.no_grad():
        for n in (ORIG - 1, ORIG, ORIG + 1, 200):
            refs[n] = hf(tokens[:, :n]).logits
            got = ours(tokens[:, :n])
            err = (got - refs[n]).abs().max().item()
            back = (saved(tokens[:, :n]).logits - got).abs().max().item()
            assert err < ATOL and back < ATOL, f"{n} tokens: max |logit diff| {err:.3g}, saved and reloaded {back:.3g}"
    # The switch moves transformers' logits of the same first L tokens by far more than the tolerance.
    assert (refs[ORIG + 1][:, :ORIG] - refs[ORIG]).abs().max().item() > 100 * ATOL


# (prompt lengths, prefill chunk): below L and at L, each crossing L while decoding; above L; a prompt past L whose
# first chunk ends below it; a chunked prefill crossing L while decoding, also batched (left
# padding; one switch for the batch, from its longest row, in both).
GENERATION_CASES = [((60,), 4096), ((64,), 4096), ((80,), 4096), ((80,), 32), ((60,), 16), ((60, 50), 16)]


def test_generation_matches_phi3_generate_below_at_and_past_the_switch(sharp_phi3):
    """Greedy tokens of our KV-cache generation equal ``Phi3ForCausalLM.generate``'s: a prompt's chunks take the
    factors of the whole prompt, and the cache is recomputed with the long factors when the sequence first passes L
    (transformers' ``prepare_inputs_for_generation``). Where decoding crosses L, keeping the cached keys instead
    (``greedy_kv``: transformers' Llama rule) gives other tokens on this model, so the recompute is what is tested."""
    from rope_helpers import greedy_kv

    from torchtune_longshort.eval.model.generation import greedy_generate
    from torchtune_longshort.models import load_hf_checkpoint

    src, hf = sharp_phi3
    config = copy.deepcopy(hf.generation_config)
    config.eos_token_id = None  # ten tokens every time (a random model may emit EOS at once)
    ours = load_hf_checkpoint(src)
    new = 10
    for lengths, chunk in GENERATION_CASES:
        prompts = [torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in lengths]
        width = max(lengths)
        ids = torch.full((len(prompts), width), 2)
        attention = torch.zeros_like(ids)
        for r, p in enumerate(prompts):
            ids[r, width - len(p):], attention[r, width - len(p):] = torch.tensor(p), 1
        with torch.no_grad():
            ref = hf.generate(ids, attention_mask=attention, generation_config=config, max_new_tokens=new,
                              do_sample=False, pad_token_id=2)[:, width:].tolist()
        got = greedy_generate(ours, prompts, new, pad_id=2, eos_id=-1, decode=str, dtype=torch.float32,
                              device=torch.device("cpu"), prefill_chunk=chunk)
        assert got == ref, f"prompts of {lengths} tokens, prefill chunk {chunk}: {got} != transformers' {ref}"
        if len(lengths) == 1 and lengths[0] <= ORIG < lengths[0] + new:
            kept = greedy_kv(ours, torch.tensor(prompts), new)[0].tolist()
            assert kept != ref[0], f"{lengths[0]}-token prompt: keeping the cache across L gives the same tokens"


def test_factor_lists_of_the_wrong_length_are_refused_with_both_numbers(tmp_path, sp_tokenizer_dir, capsys):
    """From a checkpoint's config.json: refused when the folder is opened, so ``longshort-validate`` (the recipe's
    own check) says it in one line and nothing is written; from ``build_rope``: the same numbers."""
    from torchtune_longshort.models import CheckpointFolder
    from torchtune_longshort.rope import build_rope
    from torchtune_longshort.training.recipe_config.validate import main as validate

    bad = tmp_path / "bad"
    _sharp_phi3_checkpoint(bad, sp_tokenizer_dir)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["rope_scaling"]["long_factor"] = PHI3_5_LONG[:-1]
    (bad / "config.json").write_text(json.dumps(cfg))
    want = r"rope_scaling\.long_factor has 7 entries, but head_dim 16 needs 8"
    with pytest.raises(ValueError, match=want):
        CheckpointFolder.open(bad)
    out = tmp_path / "out"
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        validate(["phi3_5_mini/longrope_16k_redpajama_book.yaml", f"checkpoint_dir={bad}", f"output_dir={out}",
                  "device=cpu"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith("longshort-validate: error: "), err
    assert "long_factor has 7 entries, but head_dim 16 needs 8" in err and not out.exists()
    with pytest.raises(ValueError, match="short_factor has 9 entries, but head_dim 16 needs 8"):
        build_rope("longrope", head_dim=16, max_seq_len=TARGET, short_factor=PHI3_5_SHORT + [1.0],
                   long_factor=PHI3_5_LONG, original_max_seq_len=ORIG, factor=4.0)
