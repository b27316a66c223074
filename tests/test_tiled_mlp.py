"""The recipe's ``tiled_mlp_tokens`` (``torchtune_longshort.training.tiled_mlp``).

References: the same model untiled (torchtune's ``FeedForward`` on the same weights) for outputs and gradients, with
and without the layer's own checkpoint, for a full fine-tune and for LoRA on the MLP; the untiled recipe on the same
config, seed and data for the losses (eager and compiled); and, for the memory, a closed form: tiled, the backward of
a layer must not hold the MLP's ``[rows, hidden]`` intermediates for every row.
"""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch
import torch._dynamo
from recipe_config import make_cfg
from torchtune.models.llama3_1._component_builders import lora_llama3_1
from torchtune.models.llama3_2._component_builders import llama3_2
from torchtune.modules.peft import get_adapter_params, set_trainable_params

from benchmarks import memory_steps as ms
from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
from torchtune_longshort.training.activation_memory import set_activation_memory
from torchtune_longshort.training.tiled_mlp import tile_mlps

RTOL = 2e-6  # float32: a tile's matmul may block its sums otherwise than the whole one's (measured: <= 1.1e-6)


def _model(lora: bool):
    torch.manual_seed(0)
    kw = dict(vocab_size=96, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=64,
              intermediate_dim=88)
    if not lora:
        return llama3_2(**kw)
    model = lora_llama3_1(["q_proj", "v_proj"], True, False, lora_rank=4, lora_alpha=8, **kw)
    for name, p in model.named_parameters():  # LoRA's B starts at 0: give every adapter a gradient path
        if "lora_b" in name:
            torch.nn.init.normal_(p, std=0.02)
    set_trainable_params(model, get_adapter_params(model))
    return model


def _grads(model, tokens):
    out = model(tokens)
    (out.float().pow(2).mean() + out.float().mean()).backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).abs().max() <= RTOL * b.abs().max().clamp_min(1e-30))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_tiled_mlp_gives_the_untiled_outputs_and_gradients(lora, checkpointing):
    whole = _model(lora)
    tiled = copy.deepcopy(whole)
    set_activation_memory(whole, checkpointing, False)
    set_activation_memory(tiled, checkpointing, False)
    notes = []
    names = tile_mlps(tiled, 40, notes.append)  # 2 x 48 rows: tiles of 40, 40 and 16
    assert names == ["layers.0.mlp", "layers.1.mlp"]
    assert notes == ["tiled MLP: 2 decoder layers' MLPs run over tiles of 40 token rows, each recomputed in the "
                     "backward pass"]
    assert list(tiled.state_dict()) == list(whole.state_dict())  # names and state dict unchanged
    tokens = torch.randint(0, 96, (2, 48), generator=torch.Generator().manual_seed(1))
    out_w, g_w = _grads(whole, tokens)
    out_t, g_t = _grads(tiled, tokens)
    assert _close(out_t, out_w)
    assert g_t.keys() == g_w.keys() and len(g_w) > 0
    bad = [n for n in g_w if not _close(g_t[n], g_w[n])]
    assert not bad, f"gradients differ: {bad}"
    with torch.no_grad():  # without gradients the tiles run one after the other, unchecked
        assert _close(tiled(tokens), whole(tokens))


def test_an_mlp_that_is_not_position_wise_runs_untiled_with_one_line():
    """Bad input: a layer whose ``mlp`` is not a torchtune FeedForward (a mixture of experts, say) is left as it is
    and named; null leaves the model alone; a non-positive tile is refused."""
    model = _model(False)
    model.layers[1].mlp = torch.nn.Identity()
    notes = []
    assert tile_mlps(model, 16, notes.append) == ["layers.0.mlp"]
    assert notes[1] == ("tiled MLP: 1 MLP of type Identity runs untiled (not a position-wise torchtune FeedForward; "
                        "first: layers.1.mlp)")
    assert "forward" not in vars(model.layers[1].mlp)
    assert tile_mlps(_model(False), None, notes.append) == [] and len(notes) == 2
    with pytest.raises(ValueError, match="tiled_mlp_tokens=0: expected a positive integer"):
        tile_mlps(_model(False), 0, notes.append)


def test_tiled_mlp_bounds_the_backward_peak():
    """The recipe's step (memory_steps: both windows, every layer checkpointed, the fused loss at alpha 0.1) at the
    1/8 replica of the Llama-3.1-8B width (LoRA, dim 512, MLP 1792), depth 2, L 1024: 2048 rows. Untiled, the deepest
    layer's backward holds the MLP's gate and up outputs, their product and their gradients for all rows; tiled (256
    rows), for one tile. So tiling must take at least three ``[rows - tile, hidden]`` float32 tensors off that
    phase's peak (measured: 4.7 of them), and leave the loss's phase as it was but for each tile's saved CPU RNG
    state (5 KiB; 16 tiles)."""
    shape, L, tile = ms.REPLICAS["8b-lora"], 1024, 256
    whole = ms.measure(shape, 2, L)["phases"]
    tiled = ms.measure(shape, 2, L, tile=tile)["phases"]
    rows = 2 * L
    floor = 3 * (rows - tile) * shape.hidden * 4
    assert whole["bwd_layer1"] - tiled["bwd_layer1"] >= floor, (whole, tiled)
    assert whole["bwd_layer0"] - tiled["bwd_layer0"] >= floor, (whole, tiled)
    assert 0 <= tiled["loss"] - whole["loss"] <= 16 * 8192


@pytest.mark.slow
def test_the_recipe_with_tiled_mlp_gives_the_untiled_losses(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, caplog,
                                                            monkeypatch):
    """The tiny recipe, 4 steps, every layer checkpointed: untiled, tiled (tiles of 40 rows: the windows' 2 x 64
    rows in 4 tiles), and tiled under ``compile: True`` (``aot_eager``: dynamo's capture of the nested checkpoints
    and AOT autograd's graphs, without inductor's C++ kernels) give the same losses."""
    monkeypatch.setenv("TORCH_COMPILE_BACKEND", "aot_eager")

    def losses(name, **over):
        torch._dynamo.reset()
        out = tmp_path / name
        cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=4, save_every_n_steps=10**6,
                       enable_activation_checkpointing=True, **{"lr_scheduler.num_warmup_steps": 0}, **over)
        recipe = LongShortFinetuneRecipe(cfg)
        recipe.setup()
        recipe.train()
        recipe.cleanup()
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if "loss" in r], recipe

    whole, _ = losses("whole")
    with caplog.at_level(logging.INFO):
        tiled, _ = losses("tiled", tiled_mlp_tokens=40)
        compiled, recipe = losses("compiled", tiled_mlp_tokens=40, compile=True)
    assert len(whole) == 4
    assert tiled == pytest.approx(whole, rel=RTOL)
    assert compiled == pytest.approx(whole, rel=RTOL)
    assert recipe.compiled.failed is None and recipe.compiled.graphs >= 1
    messages = [r.getMessage() for r in caplog.records]
    line = ("tiled MLP: 2 decoder layers' MLPs run over tiles of 40 token rows, each recomputed in the backward pass")
    assert messages.count(line) == 2
