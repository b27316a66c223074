"""What ``set_activation_memory`` hands torchtune, checked on this CPU (CUDA's streams stubbed, as
tests/test_activation_offloading.py does, since a CPU cannot build them): which modules get checkpointed, which
context manager the offloaded forward enters, what that manager was given, and that the forward runs inside it.

References: torchtune 0.6.1's own ``training.get_act_offloading_ctx_manager`` and ``set_activation_checkpointing`` on
a second copy of the same model, and the model's own ``TransformerSelfAttentionLayer`` modules. Each test killed a
hand mutant the existing tests let through (no checkpoint condition; another wrap policy; the no-op manager; the
manager built for another module; the forward run outside the context)."""

from __future__ import annotations

import pytest
import torch
from torchtune import modules, training
from torchtune.models.llama2 import llama2

from torchtune_longshort.training.activation_memory import OffloadedForward, set_activation_memory


def _tiny():
    torch.manual_seed(0)
    return llama2(vocab_size=64, num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=16, max_seq_len=32)


def _wrapped(model):
    """{name: type of the wrapped module} of every checkpoint wrapper in ``model``."""
    return {n: type(m._checkpoint_wrapped_module) for n, m in model.named_modules()
            if hasattr(m, "_checkpoint_wrapped_module")}


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda *a, **k: object())
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: object())


def test_checkpointing_wraps_what_torchtunes_own_call_wraps_and_nothing_when_off():
    ours, theirs, off = _tiny(), _tiny(), _tiny()
    set_activation_memory(ours, True, False)
    training.set_activation_checkpointing(theirs, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    layers = {n for n, m in off.named_modules() if isinstance(m, modules.TransformerSelfAttentionLayer)}
    assert len(layers) == 2
    assert _wrapped(ours) == _wrapped(theirs)
    assert set(_wrapped(ours).values()) == {modules.TransformerSelfAttentionLayer}
    assert set_activation_memory(off, False, False) is off and _wrapped(off) == {}


def test_the_offloaded_forward_enters_torchtunes_manager_built_for_the_model(fake_cuda):
    model, reference = _tiny(), _tiny()
    forward = set_activation_memory(model, True, True)
    theirs = training.get_act_offloading_ctx_manager(reference, True)
    assert isinstance(forward, OffloadedForward) and forward.model is model
    assert type(forward.ctx) is type(theirs)  # torchtune's OffloadActivations, not its no-op context
    # torchtune hooks the model's own output layer so that it is never offloaded: the same hooks as on its own call
    for hooks in ("_forward_pre_hooks", "_forward_hooks"):
        assert len(getattr(model.output, hooks)) == len(getattr(reference.output, hooks)) == 1, hooks


def test_the_model_runs_inside_the_context():
    seen = []

    class Recorder:
        inside = False

        def __enter__(self):
            self.inside = True

        def __exit__(self, *exc):
            self.inside = False

    ctx, model = Recorder(), torch.nn.Linear(3, 2)
    model.register_forward_pre_hook(lambda *a: seen.append(ctx.inside))
    out = OffloadedForward(model, ctx)(torch.ones(1, 3))
    assert seen == [True] and not ctx.inside
    torch.testing.assert_close(out, model(torch.ones(1, 3)))
