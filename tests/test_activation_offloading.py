"""``enable_activation_offloading``: torchtune's activation offloading around the recipe's forward
(``torchtune_longshort.training.activation_memory``).

On this CPU: the two refusals (no checkpointing: both keys named; a CPU device: why), before any output folder or
model change. On a GPU (skipped here): the offloaded forward leaves the checkpointed layers' inputs off the GPU
(``memory_allocated`` after the forward, against the same step without offloading) and gives the same loss and the
same gradients, on the fused path and on the checkpointed one (where torchtune's hooks on ``model.output`` fire).
"""

from __future__ import annotations

import pytest
import torch
from recipe_config import make_cfg
from torchtune.models.llama2 import llama2

from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.training.activation_memory import OffloadedForward, set_activation_memory


def _refusal(tmp_path, ckpt, tok, **over):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    out = tmp_path / "out"
    with pytest.raises(ValueError) as err:
        LongShortFinetuneRecipe(make_cfg(ckpt, tok, out, enable_activation_offloading=True, **over))
    assert not out.exists()
    assert "\n" not in str(err.value)
    return str(err.value)


def test_offloading_without_checkpointing_is_refused(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    msg = _refusal(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, enable_activation_checkpointing=False)
    assert "enable_activation_offloading=True needs enable_activation_checkpointing=True" in msg, msg


def test_offloading_on_a_cpu_is_refused(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    msg = _refusal(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, enable_activation_checkpointing=True, device="cpu")
    assert "enable_activation_offloading=True is not accepted with device=cpu" in msg, msg
    assert "in host memory already" in msg and "enable_activation_offloading=False" in msg, msg


def _tiny(layers=2, dim=64, device="cpu", dtype=torch.float32):
    torch.manual_seed(0)
    with torch.device(device):
        model = llama2(vocab_size=256, num_layers=layers, num_heads=4, num_kv_heads=2, embed_dim=dim, max_seq_len=4096)
    return model.to(dtype)


def _checkpointed_layers(model) -> int:
    return sum(1 for m in model.modules() if type(m).__name__ == "CheckpointWrapper")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU refusal")
def test_set_activation_memory_on_a_cpu():
    """Refused before the model changes; without offloading the model is its own forward, layers checkpointed."""
    model = _tiny()
    with pytest.raises(ValueError, match="in host memory already"):
        set_activation_memory(model, True, True)
    with pytest.raises(ValueError, match="needs enable_activation_checkpointing=True"):
        set_activation_memory(model, False, True)
    assert _checkpointed_layers(model) == 0
    assert set_activation_memory(model, True, False) is model
    assert _checkpointed_layers(model) == 2


def test_pageable_offloading_sets_torchtunes_host_copies_unpinned(monkeypatch):
    """``pin_memory=False`` reaches torchtune's ``OffloadActivations`` (its ``use_pin_memory``, read at each pack
    and unpack), the default stays pinned as in torchtune; CUDA's streams stubbed, as a CPU cannot build them."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda *a, **k: object())
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: object())
    pinned = set_activation_memory(_tiny(), True, True)
    pageable = set_activation_memory(_tiny(), True, True, pin_memory=False)
    assert pinned.ctx.use_pin_memory is True and pageable.ctx.use_pin_memory is False


def _gpu_step(offload: bool, fused: bool, layers: int, dim: int, L: int, pin_memory: bool = True):
    model = _tiny(layers, dim, "cuda", torch.bfloat16)
    forward = set_activation_memory(model, True, offload, pin_memory)
    assert isinstance(forward, OffloadedForward) == offload
    loss_fn = LongShortLoss(alpha=0.1, fused=fused)
    loss_fn.set_model_output(model)
    g = torch.Generator().manual_seed(1)
    e = L // 4
    seq = torch.randint(0, 256, (1, L + e + 1), generator=g).cuda()
    ta, tb, la, lb = seq[:, :L], seq[:, e:e + L], seq[:, 1:L + 1], seq[:, e + 1:e + L + 1]
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    hidden = forward(torch.cat([ta, tb]))
    torch.cuda.synchronize()
    after_forward = torch.cuda.memory_allocated() - base
    out = loss_fn(hidden[:1], hidden[1:], la, lb, e)
    out.loss.backward()
    grads = {n: p.grad.float().cpu() for n, p in model.named_parameters()}
    return after_forward, out.loss.detach().float().cpu(), grads


@pytest.mark.skipif(not torch.cuda.is_available(), reason="offloading moves GPU memory to host memory")
@pytest.mark.parametrize("fused,pin_memory", [(True, True), (False, True), (True, False)],
                         ids=["fused", "checkpointed", "fused-pageable"])
def test_gpu_offloading_moves_layer_inputs_to_host(fused, pin_memory):
    layers, dim, L = 4, 256, 2048
    plain_mem, plain_loss, plain_grads = _gpu_step(False, fused, layers, dim, L)
    off_mem, off_loss, off_grads = _gpu_step(True, fused, layers, dim, L, pin_memory)
    # the checkpointed inputs ([2, L, dim] bf16) leave the GPU (torchtune keeps its 5 latest offloaded tensors until
    # backward starts: the final norm's saved tensors, and at most the last layer's input)
    moved = plain_mem - off_mem
    assert moved >= (layers - 1) * 2 * L * dim * 2, (plain_mem, off_mem)
    torch.testing.assert_close(off_loss, plain_loss, rtol=1e-6, atol=0)
    # the copies are exact; flash attention's backward may add in another order from run to run
    for name, g in plain_grads.items():
        assert (off_grads[name] - g).norm() <= 1e-2 * g.norm() + 1e-8, name
