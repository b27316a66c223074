"""CLEX under activation checkpointing (the recipe's ``enable_activation_checkpointing``).

CLEX draws t and its training positions once per decoder forward (``CLEXRoPE.prepare``, a decoder pre-hook) and
dropped them after the forward. Checkpointing re-runs each layer's forward inside backward: the recompute then
found no training state, fell back to the inference rule (another t, no gradient through the ODE, positions
0..s-1) and saved fewer tensors -- torch raised ``CheckpointError: A different number of tensors was saved`` at
the first backward (H100, SmolLM2-135M). The reference here is the same model without checkpointing under the
same RNG state: a checkpointed step must give it the same loss and the same gradients, every parameter.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torchtune import modules, training

from torchtune_longshort.models import apply_rope_scaling

VOCAB = 96
ORIG = 32
TARGET = 128  # t_max = 4


def _tiny_clex(layers: int = 2, **clex_kwargs):
    from torchtune.models.llama2._component_builders import llama2

    torch.manual_seed(0)
    model = llama2(vocab_size=VOCAB, num_layers=layers, num_heads=4, num_kv_heads=2, embed_dim=64, max_seq_len=ORIG)
    apply_rope_scaling(model, "clex", TARGET, time_dt=0.25, **clex_kwargs)
    rope = model.layers[0].attn.pos_embeddings
    with torch.no_grad():  # off the NTK path, so the ODE parameters get gradients through every layer
        rope.ode_down_proj.normal_(std=0.05, generator=torch.Generator().manual_seed(1))
    model.clex_kwargs = clex_kwargs
    return model.train()


def _checkpointed(model, reentrant: bool = False):
    # A second build, not a deepcopy: the decoder hooks apply_rope_scaling installs are closures over its RoPE
    # module, so a deepcopy's hooks would prepare the original's module.
    out = _tiny_clex(len(model.layers), **model.clex_kwargs)
    out.load_state_dict(model.state_dict())
    if reentrant:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

        wrapper = functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT)
        training.set_activation_checkpointing(
            out, auto_wrap_policy={modules.TransformerSelfAttentionLayer}, checkpoint_wrapper_fn=wrapper
        )
    else:  # what the recipe does
        training.set_activation_checkpointing(out, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    return out


def _grads(model, steps: int, seed: int, seq_len: int = ORIG):
    """``steps`` forward+backward passes (gradients accumulate, as in the recipe); loss list and grads by name."""
    torch.manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (steps, 2, seq_len))
    model.zero_grad(set_to_none=True)
    losses, ts = [], []
    rope = next(m for m in model.modules() if getattr(m, "method", None) == "clex")
    orig_prepare = rope.prepare

    def prepare(*a, **k):
        orig_prepare(*a, **k)
        ts.append(rope.current_t)

    rope.prepare = prepare
    torch.manual_seed(seed + 1)  # the RNG stream t and the positions are drawn from
    for step in range(steps):
        logits = model(tokens[step])
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).float(),
                                                 tokens[step][:, 1:].reshape(-1))
        loss.backward()
        losses.append(loss.detach())
    del rope.prepare
    # checkpoint_wrapper inserts "_checkpoint_wrapped_module." into the names; compare by the plain name
    grads = {n.replace("_checkpoint_wrapped_module.", ""): p.grad for n, p in model.named_parameters()}
    return torch.stack(losses), grads, ts


@pytest.mark.parametrize(
    "clex_kwargs",
    [{}, {"t_min": 4}, {"log_scale": True}, {"sample_positions": False}],
    ids=["t_min1", "t_min4", "log_scale", "no_sampled_positions"],
)
def test_clex_checkpointed_step_equals_the_plain_step(clex_kwargs):
    model = _tiny_clex(**clex_kwargs)
    ref_loss, ref_grads, ref_ts = _grads(model, steps=3, seed=7)
    got_loss, got_grads, got_ts = _grads(_checkpointed(model), steps=3, seed=7)
    assert got_ts == ref_ts and (clex_kwargs.get("t_min") != 4 or set(ref_ts) == {4})
    torch.testing.assert_close(got_loss, ref_loss, rtol=0, atol=0)
    assert ref_grads.keys() == got_grads.keys()
    for name, g in ref_grads.items():
        assert g is not None and got_grads[name] is not None, name
        torch.testing.assert_close(got_grads[name], g, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
    ode = ref_grads["layers.0.attn.pos_embeddings.ode_down_proj"]
    assert ode.abs().sum() > 0  # the ODE did train through the checkpointed layers


def test_clex_refuses_reentrant_checkpointing():
    """Reentrant checkpointing runs the layer forward without autograd and back-propagates each layer's
    recomputation separately through the ODE solution all layers share: refused with a clear error (it gave
    silently wrong gradients before), rather than torch's 'backward through the graph a second time'."""
    ck = _checkpointed(_tiny_clex(t_min=2), reentrant=True)  # t >= 2: the frequencies depend on the ODE
    torch.manual_seed(3)
    with pytest.raises(RuntimeError, match="non-reentrant"):
        ck(torch.randint(0, VOCAB, (2, ORIG)))


def test_clex_checkpointed_eval_between_steps_keeps_the_training_state_out():
    """An eval forward (no grad) between a training forward and its backward does not replace what the
    recompute uses; after training the module is back to the inference rule and holds no forward's state."""
    model = _tiny_clex()
    ck = _checkpointed(model)
    rope = ck.layers[0]._checkpoint_wrapped_module.attn.pos_embeddings
    torch.manual_seed(5)
    tokens = torch.randint(0, VOCAB, (2, ORIG))
    torch.manual_seed(6)
    ref = model(tokens).float().logsumexp(-1).mean()
    ref.backward()
    torch.manual_seed(6)
    out = ck(tokens).float().logsumexp(-1).mean()
    ck.eval()
    with torch.no_grad():
        ck(tokens)
    ck.train()
    out.backward()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(
        ck.layers[0]._checkpoint_wrapped_module.attn.pos_embeddings.ode_down_proj.grad,
        model.layers[0].attn.pos_embeddings.ode_down_proj.grad, rtol=1e-5, atol=1e-6,
    )
    assert rope._state is None and rope.current_t is None


def test_clex_model_copies_and_pickles_after_a_training_step():
    """The state kept for recomputation holds tensors inside an autograd graph: deepcopy and pickling leave it out."""
    import copy
    import io

    model = _tiny_clex()
    torch.manual_seed(2)
    model(torch.randint(0, VOCAB, (2, ORIG))).float().mean().backward()
    rope = model.layers[0].attn.pos_embeddings
    assert rope._recompute.state is not None
    copied = copy.deepcopy(model)
    assert copied.layers[0].attn.pos_embeddings._recompute.state is None
    torch.save(rope, io.BytesIO())  # (the decoder itself carries hook closures, which do not pickle)


def _recipe_losses(out, tiny_llama2_dir, sp_tokenizer_dir, checkpointing: bool) -> list:
    from recipe_config import make_cfg, train_rows

    model = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "clex", "max_seq_len": 256,
             "original_max_seq_len": 64, "t_min": 2, "time_dt": 0.25,
             "model": {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(tiny_llama2_dir)}}
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, model=model, max_steps=2, save_every_n_steps=2,
                   batch_size=2, enable_activation_checkpointing=checkpointing, **{"dataset.limit": 10})
    return [(r["step"], r["loss"]) for r in train_rows(cfg) if "loss" in r]


def test_recipe_trains_clex_with_activation_checkpointing(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, caplog):
    """The GPU failure, through the recipe: 2 steps of CLEX with ``enable_activation_checkpointing=True`` run and
    give the losses of the same run without it (same seed, same draws of t and positions)."""
    import logging

    with caplog.at_level(logging.WARNING):
        plain = _recipe_losses(tmp_path / "plain", tiny_llama2_dir, sp_tokenizer_dir, checkpointing=False)
    # the save's note names the step folder, not the staging folder the commit renamed away
    said = [r.getMessage() for r in caplog.records if "is not representable" in r.getMessage()]
    assert said and all(str(tmp_path / "plain" / "step_2") in m and ".staging" not in m for m in said), said
    ckpt = _recipe_losses(tmp_path / "ckpt", tiny_llama2_dir, sp_tokenizer_dir, checkpointing=True)
    assert [s for s, _ in plain] == [1, 2]
    assert [s for s, _ in ckpt] == [1, 2]
    assert [loss for _, loss in ckpt] == pytest.approx([loss for _, loss in plain], rel=1e-5)


def test_the_clex_cost_benchmark_runs_through_a_step_that_draws_t_1(capsys):
    """benchmarks/rope_clex_cost.py draws t in [1, t_max] as training does; at t = 1 ``inv_freq_at`` returns the base
    frequencies with no graph, and the ODE row's ``backward()`` raised "element 0 of tensors does not require grad"
    (the second of ``--steps 2 --t-max 8``'s draws). Seeded: t_max 2 draws 1 within these three steps."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import rope_clex_cost

    rope_clex_cost.main(["--steps", "2", "--dim", "64", "--layers", "1", "--seq", "16", "--t-max", "2"])
    out = capsys.readouterr().out
    drawn = json.loads(out.split("uniformly in [1, 2]: ")[1].split(")")[0])
    assert "CLEX ODE solve + backward only" in out and 1 in drawn
