"""apply_rope_scaling on torchtune decoders: every base model family, KV-cache decoding vs full forward for
each method, EABF's per-layer query factor, the YAML component (the HF checkpoint round trip:
test_models_rope_checkpoint.py)."""

from __future__ import annotations

import math

import pytest
import torch

from torchtune_longshort.models import apply_rope_scaling
from torchtune_longshort.rope import ScaledRoPE

from rope_helpers import greedy_full, greedy_kv

VOCAB = 96
ORIG = 32
TARGET = 128


def tiny(family: str, layers: int = 2, max_seq_len: int = ORIG):
    import importlib

    torch.manual_seed(0)
    builder = getattr(importlib.import_module(f"torchtune.models.{family}._component_builders"), family)
    kw = dict(vocab_size=VOCAB, num_layers=layers, num_heads=4, num_kv_heads=2, embed_dim=64, max_seq_len=max_seq_len)
    if family in ("mistral", "qwen2", "llama3"):
        kw["intermediate_dim"] = 128
    return builder(**kw).eval()


@pytest.mark.parametrize("family", ["llama2", "llama3", "mistral", "qwen2"])
def test_apply_swaps_every_rope_and_every_max_seq_len(family):
    model = tiny(family)
    old_base = model.layers[0].attn.pos_embeddings.base
    apply_rope_scaling(model, "yarn", TARGET)
    ropes = {id(layer.attn.pos_embeddings) for layer in model.layers}
    assert len(ropes) == 1
    rope = model.layers[0].attn.pos_embeddings
    assert isinstance(rope, ScaledRoPE) and rope.method == "yarn" and rope.base == old_base
    assert rope.layout == ("half" if family == "qwen2" else "interleaved")
    assert model.max_seq_len == TARGET and all(layer.attn.max_seq_len == TARGET for layer in model.layers)
    assert model.rope_scaling["factor"] == TARGET / ORIG and model.rope_scaling["original_max_seq_len"] == ORIG
    with torch.no_grad():
        assert model(torch.randint(0, VOCAB, (1, TARGET))).shape == (1, TARGET, VOCAB)
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.randint(0, VOCAB, (1, TARGET + 1)))
    # setup_caches reads the decoder's max_seq_len: the cache covers the target length.
    model.setup_caches(batch_size=1, dtype=torch.float32)
    assert model.layers[0].attn.kv_cache.k_cache.shape[2] == TARGET
    with pytest.raises(ValueError, match="before|setup_caches|first"):
        apply_rope_scaling(model, "linear", 2 * TARGET)


@pytest.mark.parametrize("family", ["llama2", "qwen2"])
def test_factor_one_reproduces_the_stock_model_in_both_layouts(family):
    model = tiny(family)
    tokens = torch.randint(0, VOCAB, (2, ORIG))
    with torch.no_grad():
        ref = model(tokens)
        apply_rope_scaling(model, "linear", ORIG, factor=1.0)
        got = model(tokens)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)


METHODS = {
    "linear": {},
    "ntk": {},
    "yarn": {},
    "abf": {},
    "eabf": {},
    "llama3": {},
    "clex": {},
    "dynamic_ntk": {},
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_kv_cache_generation_equals_full_forward(method):
    model = tiny("llama2")
    apply_rope_scaling(model, method, TARGET, **METHODS[method])
    if method == "clex":
        with torch.no_grad():  # a trained-looking CLEX, not the NTK path
            model.layers[0].attn.pos_embeddings.ode_down_proj.normal_(std=0.05)
    # dynamic NTK changes its base with every token past L, and cached keys keep theirs (as in transformers,
    # see test_rope_hf_parity): the two decodings agree only while the length stays within L.
    # CLEX's t changes at multiples of L: keep the decode within one t.
    prompt_len, steps = {"dynamic_ntk": (20, 10), "clex": (70, 20)}.get(method, (60, 40))
    prompt = torch.randint(0, VOCAB, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    full_tokens, full_logits = greedy_full(model, prompt, steps)
    kv_tokens, kv_logits = greedy_kv(model, prompt, steps)
    assert kv_tokens.tolist() == full_tokens.tolist()
    torch.testing.assert_close(kv_logits, full_logits, rtol=0, atol=1e-4)


def test_eabf_scales_queries_from_layer_two_and_only_queries():
    L = 8
    model = tiny("llama2", layers=3)
    apply_rope_scaling(model, "eabf", TARGET, original_max_seq_len=L)
    seen = {}
    for i, layer in enumerate(model.layers):
        for name in ("q_proj", "k_proj"):
            proj = getattr(layer.attn, name)
            # A hook registered after ours sees the output after our scaling; recompute the raw projection.
            proj.register_forward_hook(
                lambda m, a, out, key=(i, name): seen.__setitem__(key, (out.detach(), (a[0] @ m.weight.T).detach()))
            )
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (1, 40)))
    want = torch.tensor([max(1.0, math.log(p + 1) / math.log(L)) for p in range(40)])
    for i in range(3):
        out, raw = seen[(i, "q_proj")]
        factor = want if i >= 2 else torch.ones(40)
        torch.testing.assert_close(out, raw * factor[None, :, None], rtol=1e-5, atol=1e-6)
        k_out, k_raw = seen[(i, "k_proj")]
        torch.testing.assert_close(k_out, k_raw)

    all_layers = tiny("llama2", layers=3)
    apply_rope_scaling(all_layers, "eabf", TARGET, original_max_seq_len=L, exempt_layers=0)
    q0 = {}
    all_layers.layers[0].attn.q_proj.register_forward_hook(lambda m, a, out: q0.__setitem__("q", (out, a[0] @ m.weight.T)))
    with torch.no_grad():
        all_layers(torch.randint(0, VOCAB, (1, 40)))
    torch.testing.assert_close(q0["q"][0], q0["q"][1] * want[None, :, None], rtol=1e-5, atol=1e-6)


def test_reapplying_replaces_hooks_instead_of_stacking():
    model = tiny("llama2", layers=3)
    apply_rope_scaling(model, "eabf", TARGET, original_max_seq_len=8)
    apply_rope_scaling(model, "eabf", TARGET, original_max_seq_len=8)
    assert len(model.layers[2].attn.q_proj._forward_hooks) == 1
    apply_rope_scaling(model, "linear", TARGET)
    assert len(model.layers[2].attn.q_proj._forward_hooks) == 0
    assert model.rope_scaling["original_max_seq_len"] == 8  # the recorded pre-trained length is kept


def test_clex_training_forward_draws_t_once_per_step_and_trains():
    model = tiny("llama2")
    apply_rope_scaling(model, "clex", TARGET, time_dt=0.1)
    rope = model.layers[0].attn.pos_embeddings
    assert rope.t_max == TARGET // ORIG
    with torch.no_grad():
        rope.ode_down_proj.normal_(std=0.05)
    model.train()
    calls = []
    orig_prepare = rope.prepare
    rope.prepare = lambda *a, **k: (calls.append(1), orig_prepare(*a, **k))[1]
    torch.manual_seed(1)
    for _ in range(4):
        logits = model(torch.randint(0, VOCAB, (2, ORIG)))
        logits.float().logsumexp(-1).mean().backward()
    assert len(calls) == 4 and rope._state is None  # once per forward, cleared after
    assert rope.ode_down_proj.grad is not None and rope.ode_down_proj.grad.abs().sum() > 0
    names = [n for n, _ in model.named_parameters()]
    assert sum("ode_down_proj" in n for n in names) == 1  # shared module: one parameter, not one per layer


def test_a_deep_copy_runs_its_own_rope_and_leaves_the_original_alone():
    """``copy.deepcopy`` of a scaled model (an EMA, a frozen reference) copies the hooks' functions, not what they
    closed over: the copy's CLEX forward prepared the original's RoPE (the copy trained with the eval path: no
    sampled t) and replacing the copy's scaling removed the original's hooks. The reference: the original itself,
    trained on the same draws."""
    import copy

    model = tiny("llama2")
    apply_rope_scaling(model, "clex", TARGET, time_dt=0.1)
    with torch.no_grad():
        model.layers[0].attn.pos_embeddings.ode_down_proj.normal_(std=0.05)
    model.train()
    twin = copy.deepcopy(model)
    rope, twin_rope = model.layers[0].attn.pos_embeddings, twin.layers[0].attn.pos_embeddings
    assert twin_rope is not rope and all(layer.attn.pos_embeddings is twin_rope for layer in twin.layers)
    x = torch.randint(0, VOCAB, (2, ORIG))
    seen = []
    for r in (rope, twin_rope):
        r.prepare = lambda *a, _r=r, _prep=r.prepare, **k: (seen.append(_r), _prep(*a, **k))[1]
    out = []
    for m, r in ((model, rope), (twin, twin_rope)):
        torch.manual_seed(3)
        r.generator = None
        logits = m(x)
        logits.float().logsumexp(-1).mean().backward()
        out.append((logits.detach(), r.ode_down_proj.grad.clone()))
    assert seen == [rope, twin_rope]  # each model's forward prepares its own RoPE
    torch.testing.assert_close(out[1][0], out[0][0])  # the same draws: the same training forward
    torch.testing.assert_close(out[1][1], out[0][1])  # and the copy's own ODE parameters get its gradient

    eabf = tiny("llama2", layers=3)
    apply_rope_scaling(eabf, "eabf", TARGET, original_max_seq_len=8)
    other = copy.deepcopy(eabf)
    apply_rope_scaling(other, "linear", TARGET)  # the copy's hooks go; the original's stay
    assert len(other.layers[2].attn.q_proj._forward_hooks) == 0
    assert len(eabf.layers[2].attn.q_proj._forward_hooks) == 1
    fresh = tiny("llama2", layers=3)
    apply_rope_scaling(fresh, "eabf", TARGET, original_max_seq_len=8)
    x = torch.randint(0, VOCAB, (1, 40))
    with torch.no_grad():
        torch.testing.assert_close(eabf(x), fresh(x))


def test_rope_scaled_is_instantiable_from_yaml():
    from omegaconf import OmegaConf
    from torchtune import config

    cfg = OmegaConf.create(
        f"""
        model:
          _component_: torchtune_longshort.models.rope_scaled
          method: yarn
          max_seq_len: {TARGET}
          model:
            _component_: torchtune.models.mistral._component_builders.mistral
            vocab_size: {VOCAB}
            num_layers: 1
            num_heads: 4
            num_kv_heads: 2
            embed_dim: 64
            intermediate_dim: 128
            max_seq_len: {ORIG}
        """
    )
    model = config.instantiate(cfg.model)
    assert model.max_seq_len == TARGET and model.rope_scaling["method"] == "yarn"
    with pytest.raises(ValueError, match="_component_"):
        config.instantiate(OmegaConf.create({"_component_": "torchtune_longshort.models.rope_scaled",
                                              "method": "yarn", "max_seq_len": 64, "model": {"x": 1}}))


def test_rope_scaled_at_its_start_length_says_the_factor_is_1(caplog, monkeypatch):
    # a torchtune builder's max_seq_len written as the target (both 128): YaRN factor 128/128 = 1 scaled nothing,
    # without a word (a walk); the inner model at its pre-trained length, or a factor given, says nothing. The config
    # check says it naming the config's key, once a process (the build that follows in tune run says no more)
    from torchtune_longshort.models import rope_scaled, rope_scaling
    from torchtune_longshort.training.recipe_config.rope_node import _check_factor

    def said(call):
        caplog.clear()
        with caplog.at_level("WARNING", logger="torchtune_longshort.models.rope_scaling"):
            out = call()
        return out, [r.getMessage() for r in caplog.records if r.name == rope_scaling.__name__]

    def build(inner_len, **kw):
        return said(lambda: rope_scaled(tiny("llama2", 1, inner_len), "yarn", TARGET, **kw))

    unscaled = (f"max_seq_len={TARGET} is the {TARGET} positions the scaling starts from: yarn's default factor "
                f"{TARGET}/{TARGET} = 1 leaves the RoPE unscaled; start from the pre-trained length (the inner model's "
                "max_seq_len, or original_max_seq_len), or give a factor")
    monkeypatch.setattr(rope_scaling, "_SAID_UNSCALED", set())
    model, logged = build(TARGET)
    assert model.rope_scaling["factor"] == 1.0 and logged == [unscaled], logged
    assert build(ORIG)[1] == [] and build(ORIG)[0].rope_scaling["factor"] == TARGET / ORIG
    assert build(TARGET, original_max_seq_len=ORIG)[1] == [] and build(TARGET, factor=2.0)[1] == []
    assert build(TARGET, original_max_seq_len=ORIG)[0].rope_scaling["factor"] == TARGET / ORIG
    monkeypatch.setattr(rope_scaling, "_SAID_UNSCALED", set())
    node = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarn", "max_seq_len": TARGET,
            "model": {"_component_": "torchtune.models.llama2.llama2", "max_seq_len": TARGET}}
    assert said(lambda: _check_factor("model", node))[1] == [f"model.{unscaled}"]
    assert build(TARGET)[1] == []  # the build after the config check: said once


def test_apply_rejects_bad_input():
    model = tiny("llama2")
    with pytest.raises(ValueError, match="method='pi' is not a RoPE method"):
        apply_rope_scaling(model, "pi", TARGET)
    with pytest.raises(ValueError, match="position-id sampler"):
        apply_rope_scaling(model, "pose", TARGET)
    with pytest.raises(ValueError, match="factor"):
        apply_rope_scaling(model, "linear", ORIG // 2)
    with pytest.raises(ValueError, match="no .layers"):
        apply_rope_scaling(torch.nn.Linear(2, 2), "linear", TARGET)


# ---- checkpoint round trip ------------------------------------------------------------------------------


# head_dim 16: 8 divisors each (LongRoPE's two caches are rebuilt by rope_init too)
LONGROPE = {"short_factor": [1.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6], "long_factor": [1.0, 1.5, 2, 3, 4, 5, 6, 8]}


@pytest.mark.parametrize("method", ["yarn", "clex", "llama3", "longrope"])
def test_meta_device_init_then_rope_init_like_distributed_recipes(method):
    """torchtune's distributed recipes build on meta, to_empty, load weights, then call rope_init()."""
    kwargs = LONGROPE if method == "longrope" else {}
    ref = tiny("llama2")
    apply_rope_scaling(ref, method, TARGET, **kwargs)
    with torch.device("meta"):
        model = tiny("llama2")
        apply_rope_scaling(model, method, TARGET, **kwargs)
    model = model.to_empty(device="cpu")
    model.load_state_dict(ref.state_dict())
    for m in model.modules():
        if hasattr(m, "rope_init"):
            m.rope_init()
    model.eval()
    tokens = torch.randint(0, VOCAB, (1, 100))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), ref(tokens))


def test_casting_the_model_keeps_rope_math_in_float32():
    model = tiny("llama2")
    apply_rope_scaling(model, "clex", TARGET)
    model.to(torch.bfloat16)
    rope = model.layers[0].attn.pos_embeddings
    assert rope.cache.dtype == torch.float32 and rope.theta.dtype == torch.float32
    assert rope.ode_up_proj.dtype == torch.float32 and rope.ode_down_proj.dtype == torch.float32
    assert model.layers[0].attn.q_proj.weight.dtype == torch.bfloat16
    with torch.no_grad():
        assert torch.isfinite(model(torch.randint(0, VOCAB, (1, 100)))).all()


def test_a_position_samplers_range_is_read_on_the_host(monkeypatch):
    """The recipe draws a position sampler's ids on the host: ``positions_on`` reads their range there and notes it
    in each RoPE, whose bounds check then reads nothing back from the device (it read once per forward: a sync on a
    GPU). Positions past the cache are still refused; a tensor changed in place since is read again."""
    from rope_helpers import linear_llama2, position_reads

    from torchtune_longshort.rope import rope_modules
    from torchtune_longshort.training.data_setup import positions_on

    reads, model = position_reads(monkeypatch), linear_llama2(num_layers=2)
    ropes, cpu, tokens = rope_modules(model), torch.device("cpu"), torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        pos = positions_on(cpu, torch.arange(8)[None] + 3, ropes)
        model(tokens, input_pos=pos)
        assert reads == []
        with pytest.raises(ValueError, match=r"input_pos spans \[60, 67\]"):
            model(tokens, input_pos=positions_on(cpu, torch.arange(8)[None] + 60, ropes))
        assert reads == []
        pos.add_(60)  # in place: not the range noted, read again
        with pytest.raises(ValueError, match=r"input_pos spans \[63, 70\]"):
            model(tokens, input_pos=pos)
        assert reads == [1]
