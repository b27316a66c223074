"""The recipe's ``compile: True`` (``torchtune_longshort.training.compile_setup``) against the same recipe eager.

Reference: the eager recipe on the same config, seed and data. Both run fp32 on this CPU; inductor's C++ kernels
may sum in another order than ATen's, so the losses may differ by float32 roundings. Measured here: no gap at all
over 4 steps for DefaultRoPE, YaRN and CLEX (the 2-layer tiny model); SmolLM2 with real weights, 4 steps: see
docs/benchmarks.md "compile vs eager (CPU)". RTOL = 2e-6 (about 17 float32 ulps) leaves room for another CPU's vector
width and order, and is well below what a wrong model gives: YaRN against plain RoPE already differ by 1.2e-5 at
step 1 on this random model.

CLEX runs with activation checkpointing (its hard case: compiled, a checkpointed CLEX layer recomputed through
another graph than its forward's and torch raised ``CheckpointError`` in backward, until CLEX's cos/sin ran
eager) and compiles with the ``aot_eager`` backend (``TORCH_COMPILE_BACKEND``, which the recipe reads as torchtune
does): dynamo's capture and AOT autograd's forward and backward graphs, where CLEX's state, its graph break and its
extra graph live, without inductor's C++ kernels, whose kind the default and YaRN cases check (their layers are the
same but for the cos/sin inputs). That saves ~50 s of C++ compiling on this machine; docs/benchmarks.md has CLEX under
inductor on the tiny model and on SmolLM2.

That compiling happened is checked, not assumed: the layers' ``CompiledCall`` records the graphs it compiled and at
which call. Steps 2-4 compile nothing new, except CLEX's one graph for the first step that draws ``t = 1`` (its
frequencies carry no ODE gradient): a per-step recompile would show as a graph at every call.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
import torch._dynamo
import torch._inductor.config
from recipe_config import make_cfg

from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
from torchtune_longshort.training.compile_setup import LOSS_EAGER, CompiledCall

pytestmark = pytest.mark.slow

RTOL = 2e-6
STEPS = 4


@pytest.fixture(scope="module", autouse=True)
def _inductor_cache(tmp_path_factory):
    """Inductor's kernels go to a folder of this test session (hygiene), compiled in this process (a worker pool
    would cost more to start than it saves for one small graph)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    with torch._inductor.config.patch(compile_threads=1):
        yield
    mp.undo()


def scaled_node(method: str, ckpt) -> dict:
    """The checkpoint's model, its 256 positions taken as 64 pre-trained ones scaled by ``method`` to 256."""
    return {"_component_": "torchtune_longshort.models.rope_scaled", "method": method, "max_seq_len": 256,
            "original_max_seq_len": 64,
            "model": {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(ckpt)}}


def _train(tmp_path, ckpt, tok, method: str, compiled: bool, steps: int = STEPS, checkpointing: bool = False):
    """The recipe for ``steps`` steps: (losses, the recipe, t drawn per forward (CLEX))."""
    torch._dynamo.reset()  # no graph of an earlier run in this process may serve this one
    cfg = make_cfg(ckpt, tok, tmp_path / f"{method}_{'compile' if compiled else 'eager'}", compile=compiled,
                   max_steps=steps, save_every_n_steps=10**6, enable_activation_checkpointing=checkpointing,
                   model=scaled_node(method, ckpt), **{"lr_scheduler.num_warmup_steps": 0})
    recipe = LongShortFinetuneRecipe(cfg)
    recipe.setup()
    rope = recipe._model.layers[0].attn.pos_embeddings
    ts = []
    if hasattr(rope, "prepare"):
        prepare = rope.prepare

        def record(*a, **k):
            prepare(*a, **k)
            ts.append(rope.current_t)

        rope.prepare = record
    recipe.train()
    recipe.cleanup()
    rows = [json.loads(line) for line in (tmp_path / cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r], recipe, ts


@pytest.mark.parametrize("method", ["default", "yarn", "clex"])
def test_compiled_recipe_gives_eager_losses(method, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, caplog,
                                            monkeypatch):
    checkpointing = method == "clex"
    if method == "clex":
        monkeypatch.setenv("TORCH_COMPILE_BACKEND", "aot_eager")
    eager, eager_recipe, _ = _train(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, method, False, STEPS, checkpointing)
    assert eager_recipe.compiled is None
    with caplog.at_level(logging.INFO):
        compiled, recipe, ts = _train(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, method, True, STEPS, checkpointing)
    calls_per_step = 2 if checkpointing else 1  # a checkpointed layer runs again in backward
    assert compiled == pytest.approx(eager, rel=RTOL), f"{method}: compiled {compiled} vs eager {eager}"
    # it did compile: every step went through both layers' compiled call, and the first call compiled the graph
    record = recipe.compiled
    assert record.failed is None and record.layers == ["layers.0", "layers.1"]
    calls = [getattr(layer, "_checkpoint_wrapped_module", layer)._compiled_call_impl for layer in recipe._model.layers]
    assert all(isinstance(c, CompiledCall) for c in calls)
    assert [c.calls for c in calls] == [STEPS * calls_per_step] * 2
    first = record.events[0]
    assert first[:2] == ("layers.0", 1) and first[2] >= 1
    # after step 1 nothing compiles again, but CLEX's graph for the first step that draws t = 1
    later = [call for _, call, _, _ in record.events[1:]]
    expected = []
    if method == "clex":
        assert len(ts) == STEPS
        expected = [i * calls_per_step + 1 for i, t in enumerate(ts) if i > 0 and (t == 1) != (ts[0] == 1)][:1]
    assert later == expected, f"{method}: graphs compiled at later calls {later} (t per step: {ts})"
    messages = [r.getMessage() for r in caplog.records]
    assert LOSS_EAGER in messages
    assert (method == "clex") == any(m.startswith("compile: clex RoPE:") for m in messages)


def test_a_layer_that_cannot_compile_runs_eager_with_one_line(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, caplog):
    """Bad input: compile on a machine where inductor finds no C++ compiler. One line names the layer and the error,
    every layer runs eager (the eager losses exactly), nothing crashes."""
    eager, _, _ = _train(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, "yarn", compiled=False, steps=2)
    no_cxx = {"cpp.cxx": ("/nonexistent/g++",), "fx_graph_cache": False}  # no cached kernel may hide the failure
    with torch._inductor.config.patch(no_cxx), torch._functorch.config.patch(enable_autograd_cache=False), \
            caplog.at_level(logging.INFO):
        compiled, recipe, _ = _train(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, "yarn", compiled=True, steps=2)
    assert compiled == eager
    assert recipe.compiled.failed.startswith("layers.0: InvalidCxxCompiler: No working C++ compiler")
    notes = [r.getMessage() for r in caplog.records if "run eager: compiling" in r.getMessage()]
    assert notes == [f"compile: the decoder layers run eager: compiling {recipe.compiled.failed}"]
    assert recipe.compiled.events == []
    assert [layer._compiled_call_impl.calls for layer in recipe._model.layers] == [1, 0]  # then eager


def test_an_unknown_backend_runs_the_layers_eager_with_one_line(monkeypatch):
    """Bad input: ``TORCH_COMPILE_BACKEND`` names no backend. One line says so; nothing is wrapped or compiled."""
    from torchtune.models.llama2 import llama2

    from torchtune_longshort.training.compile_setup import compile_decoder

    monkeypatch.setenv("TORCH_COMPILE_BACKEND", "no_such_backend")
    model = llama2(vocab_size=64, num_layers=2, num_heads=2, num_kv_heads=2, embed_dim=32, max_seq_len=16)
    notes = []
    record = compile_decoder(model, True, notes.append)
    assert notes == ["compile: the decoder layers run eager: TORCH_COMPILE_BACKEND='no_such_backend' is not a "
                     "torch.compile backend (torch._dynamo.list_backends() names them)"]
    assert record.failed and all(layer._compiled_call_impl is None for layer in model.layers)
    model(torch.randint(0, 64, (1, 8)))  # runs, eager


def test_the_benchmarks_out_folder_holding_other_files_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    """``benchmarks/compile_throughput.py --out DIR`` deletes each run's checkpoints and kernel cache by name after it:
    a folder holding a user's files was taken as it was (and ``step_*`` under a run's name deleted); now refused."""
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    import compile_throughput

    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setattr(sys, "argv", ["compile_throughput.py", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_info:
        compile_throughput.main()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and f"--out {str(tmp_path)!r} exists and is not an empty folder" in err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
