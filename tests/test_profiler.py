"""``profiler:``: torchtune's ``setup_torch_profiler`` node, as every torchtune config carries it, run by the recipe
(``torchtune_longshort.training.profiling``) on this CPU.

Reference: torchtune's own trace handler's layout (``<profiler.output_dir>/iteration_<k>/`` with a
``*.pt.trace.json.gz`` and ``rank0_key_averages.txt``), ``k`` the step the cycle's active steps end at. Before, the
recipe refused the key as unknown. ``enabled: False`` (torchtune's shipped value) writes nothing.
"""

from __future__ import annotations

import gzip
import logging
import json

import pytest
from recipe_config import make_cfg

from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

PROFILER = {"_component_": "torchtune.training.setup_torch_profiler", "enabled": True, "cpu": True, "cuda": True,
            "profile_memory": False, "with_stack": False, "record_shapes": True, "with_flops": False,
            "wait_steps": 1, "warmup_steps": 1, "active_steps": 1, "num_cycles": 1}


def _run(tmp_path, ckpt, tok, profiler, steps=3, **over):
    out = tmp_path / "out"
    cfg = make_cfg(ckpt, tok, out, **{"max_steps": steps, "save_every_n_steps": 10**6, "profiler": profiler,
                                      "lr_scheduler.num_warmup_steps": 0, **over})
    recipe = LongShortFinetuneRecipe(cfg)
    recipe.setup()
    recipe.train()
    recipe.cleanup()
    return out


def test_enabled_profiler_writes_a_trace_under_output_dir(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    # no profiler.output_dir: output_dir/profiling_outputs (torchtune's configs' ${output_dir}/profiling_outputs)
    out = _run(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, PROFILER)
    cycle = out / "profiling_outputs" / "iteration_3"  # wait 1 + warmup 1 + active 1: written after step 3
    traces = list(cycle.glob("*.pt.trace.json.gz"))
    assert len(traces) == 1, sorted(p.name for p in out.rglob("*"))
    events = json.loads(gzip.open(traces[0]).read())["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert "ProfilerStep#2" in names and {"aten::mm", "aten::bmm"} & names, sorted(names)[:20]  # step 3's ops
    assert "ProfilerStep*" in (cycle / "rank0_key_averages.txt").read_text()
    # the recipe lists the traces as its own: overwrite_output_dir=True may delete the folder again
    again = _run(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, {**PROFILER, "enabled": False}, steps=1,
                 overwrite_output_dir=True)
    assert not (again / "profiling_outputs").exists()


def test_disabled_profiler_writes_nothing(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    trace_dir = tmp_path / "traces"
    out = _run(tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
               {**PROFILER, "enabled": False, "output_dir": str(trace_dir)}, steps=1)
    assert not trace_dir.exists() and not (out / "profiling_outputs").exists()
    assert (out / "step_1").is_dir()


def test_a_profiler_node_without_a_component_is_torchtunes_profiler(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    # `profiler.enabled=True` over a config without the node, as torchtune's recipes take it (they fill in
    # setup_torch_profiler): refused as "profiler._component_ is missing"
    from torchtune_longshort.training.recipe_config import load_recipe_config

    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=3,
                   profiler={"enabled": True, "wait_steps": 1, "warmup_steps": 1, "active_steps": 1})
    profiler = load_recipe_config(cfg).profiler
    assert (profiler.component, profiler.enabled) == (PROFILER["_component_"], True)
    assert not (tmp_path / "out").exists()



@pytest.mark.parametrize("key", ["wait_steps", "warmup_steps", "active_steps", "num_cycles"])
def test_a_null_step_count_is_torchtunes_default_not_refused(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, key):
    # torchtune's setup_torch_profiler takes None for each (its default: 5 / 5 / 2 / 1), so `profiler.<key>: null`
    # is its default, not a null refused as an integer (the null check is for components whose default is not None)
    import inspect

    from torchtune.training import setup_torch_profiler

    from torchtune_longshort.training.recipe_config import load_recipe_config

    assert inspect.signature(setup_torch_profiler).parameters[key].default is None  # the reference
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=20,
                   profiler={**PROFILER, key: None})
    assert getattr(load_recipe_config(cfg).profiler, key) is None
    assert not (tmp_path / "out").exists()

BAD = [
    ({"wait_steps": -1}, r"profiler.wait_steps=-1 is not accepted: expected an integer >= 0"),
    ({"active_steps": 0}, r"profiler.active_steps=0 is not accepted: expected an integer >= 1"),
    ({"enabled": "yes"}, r"profiler.enabled='yes' is not accepted: expected true or false"),
    ({"wait_step": 1}, r"'profiler.wait_step' \(did you mean 'wait_steps'\?\)"),
    ({"_component_": "torch.profiler.profile"}, r"profiler._component_='torch.profiler.profile' is not accepted"),
    ({"wait_steps": 5, "warmup_steps": 3}, r"= 8 optimizer steps come before the first traced one, and this run "
                                          r"trains 3: no step would be traced"),
    ({"cpu": False}, r"profiler.cpu=False with device=cpu"),
]


@pytest.mark.parametrize("over,match", BAD, ids=[m[:24] for _, m in BAD])
def test_bad_profiler_values_are_refused_in_one_line(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, match):
    out = tmp_path / "out"
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=3, profiler={**PROFILER, **over})
    with pytest.raises((ValueError, KeyError)) as err:
        LongShortFinetuneRecipe(cfg)
    assert pytest.importorskip("re").search(match, str(err.value)), str(err.value)
    assert "\n" not in str(err.value) and not out.exists()


def test_each_ranks_chrome_trace_carries_its_rank(tmp_path, monkeypatch, tiny_llama2_dir, sp_tokenizer_dir):
    """Under torchrun torchtune 0.6.1's trace handler names every rank's chrome trace ``r0-...`` (seen in a
    2-process gloo run: two ``r0-`` files in ``iteration_1/``, one holding rank 1's trace); rank 1's is now ``r1-``,
    beside its ``rank1_key_averages.txt``. Rank 1 is stood in for by torchtune's rank here."""
    import torch

    from torchtune_longshort.training.profiling import StepProfiler
    from torchtune_longshort.training.recipe_config import load_recipe_config

    section = load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=2, profiler={
        **PROFILER, "wait_steps": 0, "warmup_steps": 0}), local=False).profiler
    monkeypatch.setattr("torchtune.utils.get_world_size_and_rank", lambda: (2, 1))
    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: None)  # the handler waits for its peers
    monkeypatch.setattr("torchtune.training._profiler.get_world_size_and_rank", lambda: (2, 1))
    prof = StepProfiler(section, str(tmp_path / "traces"), torch.device("cpu"), 2, lambda _: None)
    prof.start()
    torch.ones(8, 8) @ torch.ones(8, 8)
    prof.step()
    prof.stop()
    names = sorted(p.name for p in (tmp_path / "traces" / "iteration_1").iterdir())
    assert [n[:3] for n in names] == ["r1-", "ran"] and names[1] == "rank1_key_averages.txt", names


def test_a_resumed_run_writes_its_traces_under_its_own_steps(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, caplog):
    """``iteration_<k>/`` is the run's optimizer step, also in a resumed run. Before, torchtune's handler numbered it
    by the profiler's count, which starts at 0 in every process: a run resumed at step 2 traced its step 3 into the
    first run's ``iteration_1/``, replacing its ``rank0_key_averages.txt`` (seen under 2 processes: both ranks')."""
    first = {**PROFILER, "wait_steps": 0, "warmup_steps": 0}  # each process traces its first step
    with caplog.at_level(logging.INFO):
        out = _run(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, first, steps=4, stop_after_step=2, save_every_n_steps=2)
    # the early end is said, with the way on (before, only the summary lines: a run that looked finished)
    said = [r.getMessage() for r in caplog.records if "stop_after_step" in r.getMessage()]
    assert said == [f"stop_after_step=2 reached: step 2 of 4 saved at {out / 'step_2'}; continue with resume=True"]
    caplog.clear()
    cycle = out / "profiling_outputs" / "iteration_1"
    kept = (cycle / "rank0_key_averages.txt").read_text()
    with caplog.at_level(logging.INFO):
        _run(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, first, steps=4, resume=True, save_every_n_steps=2)
    assert not [r for r in caplog.records if "reached" in r.getMessage()]  # trained to its end
    assert sorted(p.name for p in (out / "profiling_outputs").iterdir()) == [".longshort_files", "iteration_1",
                                                                             "iteration_3"]
    assert (cycle / "rank0_key_averages.txt").read_text() == kept and len(list(cycle.glob("*.pt.trace.json.gz"))) == 1
    assert "ProfilerStep*" in (out / "profiling_outputs" / "iteration_3" / "rank0_key_averages.txt").read_text()
