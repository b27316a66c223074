"""benchmarks/memory_model.py (and memory_steps.py): the fit against closed forms on synthetic points, the
longest-window search against its closed-form root, and the CPU offloading stand-in against the bytes a checkpointed
layer saves."""

from __future__ import annotations

import math

import torch

from benchmarks import memory_model as mm
from benchmarks import memory_steps as ms

PL, GR, HELD = 2e8, 1e8, 1.6e4  # a layer's parameters + AdamW states, its gradients, its held input per token
TRUE = {  # bytes = A + B n + L (a + b n) + k rows, per measured phase
    "forward": mm.Coef(3e9, PL, 9e4, HELD),
    "loss": mm.Coef(3.5e9, PL, 5e4, HELD, 1.0e6),
    "bwd_head": mm.Coef(3.4e9, PL, 4e4, HELD),
    "bwd_first": mm.Coef(3.9e9, PL, 2.5e5, HELD),
    "bwd_end": mm.Coef(4.2e9, PL + GR, 2.2e4, 0.0),
    "optimizer": mm.Coef(4.4e9, PL + GR, 3.0, 0.0),
}


def _point(depth: int, L: int, num_chunks: int, offload: bool = False) -> dict:
    e = L // 4
    rows = mm.loss_rows(L, e, num_chunks)
    at = {ph: c.at(depth, L, rows) for ph, c in TRUE.items()}
    phases = {"forward": at["forward"], "loss": at["loss"], "bwd_head": at["bwd_head"],
              "optimizer": at["optimizer"], "bwd_layer0": at["bwd_end"]}
    if depth > 1:
        phases[f"bwd_layer{depth - 1}"] = at["bwd_first"]
    return dict(shape="synthetic", depth=depth, L=L, e=e, num_chunks=num_chunks, rows=rows, dtype="fp32",
                offload=offload, base=1e9 + PL * depth, phases=phases, moved_bytes=1e6 + 8e3 * depth * L)


def test_fit_recovers_the_coefficients_of_a_closed_form():
    points = [_point(d, L, 8) for d in (1, 2) for L in (256, 512, 1024, 2048)] + [_point(1, 2048, 32)]
    fits = mm.fit_group(points)
    first = TRUE["bwd_first"]
    # layer 0's backward: the deepest layer's, holding its own input only and every other layer's gradients
    want_all = dict(TRUE, bwd_last=mm.Coef(first.A - GR, PL + GR, first.a + HELD, 0.0))
    for ph, want in want_all.items():
        got = fits[ph]
        for name in ("A", "B", "a", "b", "k"):
            assert math.isclose(getattr(got, name), getattr(want, name), rel_tol=1e-6, abs_tol=1e-3), (ph, name)


def test_longest_window_is_the_closed_form_root():
    """One linear phase: the search returns floor((cap - A - B n) / (a + b n)) rounded down to the multiple."""
    c = mm.Coef(5e9, 2e8, 3e5, 1e4)
    model = {("1b-full", False): {ph: (c if ph == "loss" else mm.Coef(0, 0, 0, 0)) for ph in mm.MODEL_PHASES}}
    n = mm.SHAPES["1b-full"].layers
    for budget, headroom, multiple in ((80e9, 0.05, 256), (141e9, 0.0, 64), (12e9, 0.1, 4)):
        cap = (1 - headroom) * budget
        want = int((cap - c.A - c.B * n) / (c.a + c.b * n)) // multiple * multiple
        got = mm.predict_longest("1b-full", budget, headroom=headroom, multiple=multiple, model=model)
        assert got == want, (budget, got, want)
    assert mm.predict_longest("1b-full", 6e9, model=model) == 0


def test_host_offload_frees_every_layer_input_but_the_stashed():
    """One step with and without the CPU stand-in: it moves one [2, L, d] float32 input more per layer; during the
    loss the inputs of the layers out of torchtune's 5-tensor stash (which the final norm's saved tensors fill) are
    gone; the step's update (so its gradients) is the one without it."""
    shape = ms.Shape("tiny", vocab=64, dim=32, heads=4, kv=2, hidden=64, layers=3)
    L, d = 128, 32
    steps = {off: ms.make_step(shape, 3, L, offload=off) for off in (False, True)}
    runs = {off: ms.measure_step(st, "tiny", 3, "fp32", off) for off, st in steps.items()}
    shallower = ms.make_step(shape, 2, L, offload=True)
    shallower.run()
    per_layer = 2 * L * d * 4
    assert runs[True]["moved_bytes"] - shallower.host.moved_bytes == per_layer
    held = runs[False]["phases"]["loss"] - runs[True]["phases"]["loss"]
    # the final norm saves 4-5 tensors (torch's rms_norm): the last layer's input is out of the stash or just in it
    assert held in (2 * per_layer, 3 * per_layer), held / per_layer
    after = [steps[off].model.state_dict() for off in (False, True)]
    for name, w in after[0].items():
        assert torch.equal(after[1][name], w), name


def test_a_cuda_step_gives_its_pinned_host_blocks_back_and_records_them(monkeypatch):
    """``run_step`` on CUDA, its calls into ``torch.cuda`` stubbed: after the step the pinned host blocks that
    offloading took are handed back (torch's host allocator rounds each to a power of two and keeps it cached, so
    the 1.25x step of ``check_longest`` allocated its larger blocks beside the first step's: ~33 GiB + 66 GiB at the
    8B shape's 40 GB window), and the step's pinned host peak is recorded."""
    calls = []
    stats = {"allocated_bytes.peak": 2**30, "allocated_bytes.current": 2**30, "num_host_alloc": 1}

    class FakeStep:
        def run(self):
            calls.append("run")
            return torch.tensor(1.5)

    monkeypatch.setattr(mm, "make_step", lambda *a, **k: FakeStep())
    for name in ("synchronize", "reset_peak_memory_stats", "empty_cache", "reset_peak_host_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: calls.append(_n), raising=False)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 7 * 2**30)
    monkeypatch.setattr(torch.cuda, "host_memory_stats", lambda: dict(stats), raising=False)
    monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: calls.append("host_emptyCache"), raising=False)
    out = mm.run_step(mm.REPLICAS["8b-lora"], 64, "cuda", offload=True, num_chunks=8)
    assert out["fit"] and out["peak_bytes"] == 7 * 2**30, out
    assert out["host_pinned_bytes"] == {"allocated_bytes.peak": 2**30, "allocated_bytes.current": 2**30}, out
    assert calls.index("reset_peak_host_memory_stats") < calls.index("run") < calls.index("host_emptyCache"), calls


def test_the_tables_import_the_fit_one_way():
    """benchmarks/memory_model.py imported memory_tables.py (for `table`), which imported memory_model.py back (a
    circle: `python benchmarks/memory_model.py table` loaded the file twice, as __main__ and as memory_model). The
    fit moved to memory_fit.py: neither memory_tables.py nor memory_fit.py imports memory_model.py (read from their
    source, every import statement); memory_model re-exports the fit's names, the same objects (its _MODEL cache is
    the fit's)."""
    import ast
    import sys
    from pathlib import Path

    bench = Path(mm.__file__).parent
    for name in ("memory_tables.py", "memory_fit.py"):
        tree = ast.parse((bench / name).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "memory_steps" in imported and not {"memory_model", "benchmarks.memory_model"} & imported, (name,
                                                                                                           imported)
    fit = sys.modules["memory_fit"]  # as memory_model imports it (its folder on sys.path)
    assert mm._MODEL is fit._MODEL and mm.predict_longest is fit.predict_longest and mm.Coef is fit.Coef


def test_table_refuses_a_gpu_runs_file_that_is_not_run_step_results(capsys):
    """`memory_model.py table --gpu-runs docs/gpu_suite_h200/longest_bounded.json` (a GPU suite's result object, not
    the run_step results --help names) printed the tables, then ended in a JSONDecodeError traceback; it is refused
    before anything prints, in one line naming the file and the format, exit 2. The files the line names as that
    format are read as json.load reads them (the reference), so the line cannot name a file of another format."""
    import json
    import re
    from pathlib import Path

    from benchmarks import memory_tables as mt

    docs = Path(__file__).resolve().parent.parent / "docs" / "gpu_suite_h200"
    assert mm.main(["table", "--gpu-runs", str(docs / "longest_bounded.json")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "longest_bounded.json: one JSON object" in err, (out, err)
    assert "parts.longest.runs" in err and "longest_points.json" in err, err
    root = docs.parent.parent
    named = re.findall(r"(docs/\S+) \(", mt.RUN_FILES)
    assert len(named) == 2, mt.RUN_FILES
    for rel in named:
        text = (root / rel).read_text()
        reference = json.loads(text) if rel.endswith(".json") else [
            json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert mt.read_runs(root / rel) == reference and reference, rel
