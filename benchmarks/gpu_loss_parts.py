"""The loss and memory parts of :mod:`gpu_suite`; each returns ``{"markdown": ..., ...}``.

- ``loss`` (P1): :mod:`loss_overhead`'s step at the Llama-3.2-1B shape at 8k (bf16, activation checkpointing):
  the fused loss at alpha 0 and 0.1 and the naive full-logits loss, step time and peak memory.
- ``longest`` (P6): one training step of the 1B shape at the window length :mod:`memory_model` predicts to be the
  longest that fits an 80 GB card, and one at 1.25x it (the device's memory capped to 80 GB).
- ``longest_8b`` (P6): the same check for the Llama-3.1-8B LoRA shape with the tiled MLP (``tiled_mlp_tokens``
  4096) and offloading, the device's memory capped to ``--longest-8b-gb``.
- ``fused_ce``: the loss alone at 1B/8k: ours at alpha 0 (and 0.1) against Liger-Kernel's fused linear
  cross-entropy and Apple's Cut Cross-Entropy, when their packages import.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

from gpu_parts import free, table


# ---------------------------------------------------------------------------------------------- P1: loss
def part_loss(smoke: bool, work: Path, opts) -> dict:
    import loss_overhead as lo

    if smoke:
        specs = {"smoke-tiny": dict(vocab=512, dim=64, layers=1, heads=4, kv=2, hidden=128, L=64)}
        device, steps = "cpu", 1
    else:
        specs = {"cuda-1b@8k": lo.SHAPES["cuda-1b"]}
        device, steps = "cuda", 7
    keep = [("fused", 0.0), ("fused", 0.1), ("naive", 0.0)]
    rows = []
    for name, spec in specs.items():
        e = spec["L"] // 4
        model, all_steps = lo.build(name, device, e, spec)
        chosen = {k: all_steps[k] for k in keep}
        mem = {k: lo.peak_bytes(model, st, device) for k, st in chosen.items()}
        tim = lo.time_steps(model, chosen, device, steps)
        rows += lo.table_rows(name, e, tim, mem)
        del model, all_steps, chosen
        free(device)
    md = table(["shape", "variant", "step ms", "peak MiB", "time / naive a=0", "mem / naive a=0",
                 "time / a=0 (same path)", "mem / a=0 (same path)"],
                [[r["shape"], r["variant"], f"{r['time_ms']:.0f}", f"{r['peak_mb']:.0f}", f"{r['time_vs_naive0']:.3f}",
                  f"{r['mem_vs_naive0']:.3f}", f"{r['time_vs_same_path_a0']:.3f}", f"{r['mem_vs_same_path_a0']:.3f}"]
                 for r in rows])
    return {"rows": rows, "markdown": md + f"\n\ne = L/4; median of {steps} interleaved steps per variant."}


# ---------------------------------------------------------------------------------------------- fused CE
def _loss_variants(h, weight, labels, L: int, e: int):
    """name -> a function of (h, weight) returning the loss over both windows' rows (``h``: ``[2, L, d]``)."""
    import torch.nn.functional as F
    from torch import nn

    from torchtune_longshort.loss import LongShortLoss

    out = {}
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device, dtype=weight.dtype)
    lin.weight = weight
    for name, alpha, report in (("ours a=0", 0.0, True), ("ours a=0, no report", 0.0, False),
                                ("ours a=0.1", 0.1, True)):
        fn = LongShortLoss(alpha=alpha, num_chunks=8, report_misalignment=report)
        fn.linear_projection = lin  # the hidden-state path, as set_model_output sets it
        out[name] = (lambda f: lambda: f(h[:1], h[1:], labels[:1], labels[1:], e).loss)(fn)
    flat_h, flat_y = h.reshape(-1, h.shape[-1]), labels.reshape(-1)
    out["naive: full float32 logits, F.cross_entropy"] = lambda: F.cross_entropy((flat_h @ weight.t()).float(), flat_y)
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss()
        out["Liger fused linear CE"] = lambda: liger(weight, flat_h, flat_y)
    except Exception as err:  # optional package: absent or broken on this machine
        out["Liger fused linear CE"] = err
    try:
        from cut_cross_entropy import linear_cross_entropy

        out["Cut Cross-Entropy"] = lambda: linear_cross_entropy(flat_h, weight, flat_y)
    except Exception as err:
        out["Cut Cross-Entropy"] = err
    return out


def part_fused_ce(smoke: bool, work: Path, opts) -> dict:
    """The output layer + loss alone, forward and backward over two L-token windows (the same rows for every loss;
    ours also sees their pairing): time and peak memory above the inputs."""
    import torch

    if smoke:
        V, d, L, device, dtype, reps = 512, 64, 64, "cpu", torch.float32, 2
    else:
        V, d, L, device, dtype, reps = 128256, 2048, 8192, "cuda", torch.bfloat16, 10
    e = L // 4
    torch.manual_seed(0)
    h = torch.randn(2, L, d, device=device, dtype=dtype, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(V, d, device=device, dtype=dtype) * d ** -0.5)
    labels = torch.randint(0, V, (2, L), device=device)
    labels[:, -1] = -100
    cuda = device == "cuda"
    rows, res = [], {}
    for name, fn in _loss_variants(h, weight, labels, L, e).items():
        if isinstance(fn, Exception):
            res[name] = {"error": f"{type(fn).__name__}: {fn}"}
            rows.append([name, "-", "-", "-", f"not run: {type(fn).__name__}"])
            continue
        try:
            times, loss = [], None
            for i in range(reps + 2):
                h.grad = weight.grad = None
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                loss = fn()
                loss.backward()
                if cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            h.grad = weight.grad = None
            free(device)
            if cuda:
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                fn().backward()
                torch.cuda.synchronize()
                peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            else:
                from tensor_memory import PeakTensorMemory

                with PeakTensorMemory() as mem:
                    fn().backward()
                peak = mem.peak_mib
            ms = 1000 * statistics.median(times[2:])
            res[name] = {"ms": ms, "peak_mib": peak, "loss": float(loss)}
            rows.append([name, f"{ms:.1f}", f"{peak:.0f}", f"{float(loss):.4f}", ""])
        except Exception as err:  # one loss failing must not sink the others
            res[name] = {"error": f"{type(err).__name__}: {err}"}
            rows.append([name, "-", "-", "-", f"failed: {type(err).__name__}: {str(err)[:120]}"])
        h.grad = weight.grad = None
        free(device)
    md = (f"V {V}, d {d}, 2 windows x L {L} rows, e {e}, {str(dtype).split('.')[-1]}; forward + backward, median of "
          f"{reps}; peak above inputs and weights\n\n" + table(["loss", "ms", "peak MiB", "loss value", "note"], rows))
    return {"results": res, "markdown": md}


# ---------------------------------------------------------------------------------------------- P6: longest window
H100_80GB_BYTES = 81559 * 2**20  # what an "80 GB" H100 reports (docs/gpu_suite_h100/probe.txt)
SMOKE_TILE = 48  # --smoke: the tiled MLP's rows a tile at the tiny shape (2 x 64-80 rows: 3-4 tiles)


def _gpu_model_of(mm, key: str, points_path):
    """:func:`memory_model.gpu_model` for shape ``key`` alone, from ``points_path`` (default: its points file),
    which need not hold the other shapes' points."""
    points = mm.load_points(Path(points_path)) if points_path else None
    every = dict(mm.SHAPES)
    try:
        mm.SHAPES.clear()
        mm.SHAPES[key] = every[key]
        return mm.gpu_model(points)
    finally:
        mm.SHAPES.clear()
        mm.SHAPES.update(every)


def part_longest(smoke: bool, work: Path, opts) -> dict:
    """:func:`memory_model.check_longest` for the 1B full fine-tune (alpha 0.1, activation checkpointing, offloading
    ``opts.longest_offload``, the loss's chunks bounded): the device's memory capped to an 80 GB card's, one step at
    the predicted longest window and one at 1.25x it. The model holds when the first fits and the second does not."""
    return _longest(smoke, opts, *_longest_plans(["longest"], opts)[0][1:])


def part_longest_8b(smoke: bool, work: Path, opts) -> dict:
    """:func:`memory_model.check_longest` for the 8B LoRA shape (32 layers, alpha 0.1, activation checkpointing and
    offloading, bounded loss chunks, the MLP tiled over ``memory_model.TILE_GPU`` rows), the device's memory capped
    to ``opts.longest_8b_gb`` GB (80 checks the 80 GB claim itself; less, a cheaper point of the same model)."""
    return _longest(smoke, opts, *_longest_plans(["longest_8b"], opts)[0][1:])


def _longest_plans(parts, opts):
    """``(part, shape, offload, chunks, tile, budget bytes)`` of each longest part among ``parts``."""
    import memory_model as mm

    plans = {"longest": ("1b-full", bool(opts.longest_offload), opts.longest_chunks or None, None, H100_80GB_BYTES),
             "longest_8b": ("8b-lora", True, None, mm.TILE_GPU, opts.longest_8b_gb * 1e9)}
    return [(p, *plans[p]) for p in parts if p in plans]


def host_memory_refusal(parts, opts) -> Optional[str]:
    """A one-line refusal when a longest part's offloaded host bytes (its larger step, 1.25x the predicted window;
    :func:`memory_model.offloaded_host_bytes`) exceed 90% of this machine's memory, before anything runs; else
    ``None``. Pinned, torch rounds every block up to a power of two: the 80 GB 8B point pins ~146 GB for ~83 GB of
    layer inputs, more than the lent machine's 128 GiB, and fits only pageable (``--offload-pinned 0``)."""
    import memory_model as mm

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    pinned = bool(opts.offload_pinned)
    two = getattr(opts, "longest_steps", 2) > 1
    for part, shape, offload, chunks, tile, budget in _longest_plans(parts, opts):
        if not offload:
            continue
        mm._MODEL["gpu"] = _gpu_model_of(mm, shape, opts.memory_points)
        L = mm.check_windows(mm.predict_longest(shape, budget, offload, chunks, tile=tile), 2 if two else 1)[-1]
        need = mm.offloaded_host_bytes(shape, L, pinned)
        if need > 0.9 * ram:
            fix = (f"add --offload-pinned 0 (pageable host copies: {mm.offloaded_host_bytes(shape, L, False) / 1e9:.0f}"
                   " GB)" if pinned else "lower the memory cap")
            return (f"{part}: its {'1.25x' if two else 'one'} step ({L} tokens a window) offloads "
                    f"{need / 1e9:.0f} GB to {'pinned' if pinned else 'pageable'} host memory, more than 90% of "
                    f"this machine's {ram / 1e9:.0f} GB; {fix}")
    return None


def _longest(smoke: bool, opts, shape: str, offload: bool, chunks, tile, budget: float) -> dict:
    import torch

    import memory_model as mm

    mm._MODEL["gpu"] = _gpu_model_of(mm, shape, opts.memory_points)
    if smoke:  # the prediction for the real card, and the step code at a tiny shape on the CPU
        L = mm.predict_longest(shape, budget, offload, chunks, tile=tile)
        tiny = replace(mm.REPLICAS[shape], layers=2)
        runs = [mm.run_step(tiny, n, "cpu", num_chunks=None, dtype="fp32",
                            tile=SMOKE_TILE if tile else None) for n in (64, 80)]
        res = dict(budget_bytes=budget, shape=shape, offload=False, tile=tile, predicted_L=L, runs=runs,
                   model_holds=None)
    else:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total))
        try:
            res = mm.check_longest(budget, shape, offload, "cuda", num_chunks=chunks, tile=tile,
                                   pin_memory=bool(getattr(opts, "offload_pinned", 1)),
                                   steps=getattr(opts, "longest_steps", 2))
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
            free("cuda")
    rows = [[r["L"], "yes" if r["fit"] else "no", f"{r.get('predicted_bytes', 0) / 2**30:.1f}",
             f"{r['peak_bytes'] / 2**30:.1f}" if r.get("peak_bytes") else "-", _host_gib(r), r.get("seconds", "-"),
             r.get("error", "")[:100]] for r in res["runs"]]
    verdict = "(smoke: not judged)" if smoke else longest_verdict(res["runs"])
    what = {"1b-full": "1B full fine-tune (Llama-3.2-1B shape, 16 layers)",
            "8b-lora": "8B LoRA (Llama-3.1-8B shape, 32 layers, rank 8)"}[shape]
    host = "" if not res["offload"] else " (pageable)" if res.get("pin_memory") is False else " (pinned)"
    md = (f"{what}, alpha 0.1, bf16, activation checkpointing, offloading {'on' + host if res['offload'] else 'off'}, "
          f"MLP {f'tiles of {tile} rows' if tile else 'whole'}, loss chunks {chunks or 'bounded'}; memory capped at "
          f"{budget / 2**30:.1f} GiB; predicted longest window L = {res['predicted_L']}: {verdict}\n\n"
          + table(["L per window", "fits", "predicted peak GiB", "measured peak GiB", "host GiB", "step s", "error"],
                  rows))
    return {**res, "markdown": md}


def longest_verdict(runs) -> str:
    """The check's verdict in words, with its direction: the predicted window must fit and 1.25x it must not."""
    if not runs[0]["fit"]:
        return "**the model is wrong**: the predicted window does not fit (the model under-estimates)"
    if len(runs) == 1:
        return "the predicted window fits (1.25x it not run: half the check)"
    if runs[1]["fit"]:
        return "**the model is wrong, on the safe side**: 1.25x the window fits too (the model over-estimates)"
    return "the model holds"


def _host_gib(run: dict) -> str:
    """A run's host memory: the pinned blocks' peak, else the process's peak resident bytes ("-": not recorded)."""
    pinned = run.get("host_pinned_bytes", {}).get("allocated_bytes.peak")
    held = pinned or run.get("host_rss_peak_bytes")
    return f"{held / 2**30:.1f}{' pinned' if pinned else ' RSS'}" if held else "-"
