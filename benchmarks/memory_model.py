"""The longest window one GPU fits: a memory model of one training step, fitted to CPU measurements (issue 34,
item 4). The step and its measurement are ``memory_steps.py``'s.

Per phase (forward, loss, backward, optimizer) the peak live tensor bytes are fitted as

    bytes = A + B n + L (a + b n) + k rows

with ``n`` layers, ``L`` tokens per window and ``rows`` the loss's largest chunk (``rows`` is proportional to ``L``
at a fixed ``num_chunks``; one point at ``num_chunks`` 32 separates ``k``). A step's peak is the largest phase.
On this CPU the model runs in fp32 (bf16 matmuls run at 0.55 GFLOP/s here, 26 GFLOP/s in fp32: measuring bf16 at
these widths is not feasible). The GPU model (bf16) converts each coefficient: ``A``, ``B`` (parameters, gradients,
AdamW states, the loss's weight gradient) and ``b`` (the checkpointed input of each layer) halve; ``k`` (the loss's
float32 ``[rows, vocab]`` buffers) keeps its bytes and gains the bf16 logits buffer an fp32 run does not allocate
(``2 vocab`` bytes a row); ``a`` (one layer's recomputation, the final norm, the loss's row copies) is scaled by the
bf16 / fp32 ratio of the same coefficient measured on a 1/8-width replica of each shape (same head size, same
ratios) in both dtypes.

With the tiled MLP (``tiled_mlp_tokens``), a phase that runs a layer adds ``t tile`` (the bytes of one tile's rows,
``t`` from points at two tile sizes; :func:`fit_tiled`), halved on the GPU.

    python benchmarks/memory_model.py measure [--only 1b-full]   # appends to memory_model_points.json (hours)
    python benchmarks/memory_model.py check                       # the depth-4 points the fit must predict
    python benchmarks/memory_model.py table                       # fit, GPU model and predictions (seconds)

The GPU suite's P6 calls :func:`predict_longest` and :func:`run_step` (see ``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# One way (model -> tables -> fit -> steps): memory_tables.py imports the fit, not this module, which re-exports the
# fit's names (memory_model.predict_longest, memory_model._MODEL, ... as before the fit moved to memory_fit.py).
from memory_fit import (  # noqa: E402  (the sibling modules, found from any folder)
    FREE_OFFLOAD_STASH, MODEL_PHASES, NO_MLP, TILE_GPU, _MODEL, Coef, _model, _ratio, _tiled, _to_gpu, fit_anchored,
    fit_group, fit_linear, fit_tiled, fitted, gpu_model, group, lstsq, phase_value, predict_bytes, predict_longest,
)
from memory_steps import (  # noqa: E402
    BOUNDED_CHUNK, GB, POINTS, REPLICAS, SHAPES, TILE, TILE_CHECK, bounded_chunks, live_bytes, load_points, loss_rows,
    make_step, run_measure,
)
from memory_tables import RunsFormatError, print_gpu_runs, print_tables, read_runs  # noqa: E402

__all__ = [  # what other scripts and the tests read of this module, its own and the fit's and steps' it re-exports
    "BOUNDED_CHUNK", "FREE_OFFLOAD_STASH", "GB", "MODEL_PHASES", "NO_MLP", "POINTS", "REPLICAS", "SHAPES", "TILE",
    "TILE_CHECK", "TILE_GPU", "_MODEL", "Coef", "_model", "_ratio", "_tiled", "_to_gpu", "bounded_chunks",
    "check_longest", "check_windows", "fit_anchored", "fit_group", "fit_linear", "fit_tiled", "fitted", "gpu_model",
    "group", "live_bytes", "load_points", "loss_rows", "lstsq", "make_step", "offloaded_host_bytes", "phase_value",
    "predict_bytes", "predict_longest", "run_measure", "run_step",
]


def offloaded_host_bytes(shape: str, L: int, pin_memory: bool = True) -> int:
    """Host bytes offloading holds at the end of a bf16 forward of ``shape`` at ``L`` tokens per window: one
    ``[2, L, dim]`` bf16 input per layer and the final norm's fp32 copy of its input (torchtune's ``RMSNorm``
    computes in fp32), each rounded up to a power of two when pinned (torch's ``CachingHostAllocator`` rounds every
    pinned block so); the few small saved tensors (token ids, LoRA's) are left out."""
    sh = SHAPES[shape]
    blocks = [2 * L * sh.dim * 2] * sh.layers + [2 * L * sh.dim * 4]
    return sum(1 << (b - 1).bit_length() if pin_memory else b for b in blocks)

# ---------------------------------------------------------------------------------------------- on a GPU (P6)
def _pinned_host_bytes() -> Dict[str, int]:
    """The CUDA host allocator's ``allocated_bytes.*`` (pinned blocks held, each rounded up to a power of two:
    ``torch.cuda.host_memory_stats``); empty where this torch has no such statistics."""
    stats = getattr(torch.cuda, "host_memory_stats", lambda: {})()
    return {k: int(v) for k, v in stats.items() if k.startswith("allocated_bytes.")}


def _peak_rss_bytes() -> int:
    """The process's peak resident set size so far, in bytes (Linux reports ``ru_maxrss`` in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _release_pinned_host_blocks() -> None:
    """Hand the pinned host blocks the CUDA host allocator keeps cached back to the system (what
    ``torch.cuda.graphs`` calls before a capture); a no-op on a torch without it."""
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:
        empty()


def run_step(shape="1b-full", L: int = 4096, device: str = "cuda", *, offload: bool = False,
             num_chunks: Optional[int] = 8, depth: Optional[int] = None, dtype: str = "bf16",
             tile: Optional[int] = None, pin_memory: bool = True) -> dict:
    """One steady-state step (:func:`make_step`) of ``shape`` (a :data:`SHAPES` key or a :class:`Shape`) at full
    depth, on ``device``: ``{"fit": True, "peak_bytes": ..., "seconds": ..., "L": ...}`` (CUDA:
    ``max_memory_allocated`` over the step, parameters and optimizer states included), or ``{"fit": False,
    "error": ...}`` when it runs out of memory (building included). ``num_chunks`` None: :func:`bounded_chunks`.
    ``pin_memory`` False: offloading's host copies pageable. On CUDA it records the host side too: the pinned
    blocks and the process's peak resident bytes so far."""
    sh = SHAPES[shape] if isinstance(shape, str) else shape
    nc = bounded_chunks(L, L // 4) if num_chunks is None else num_chunks
    out = dict(shape=sh.name, L=L, depth=depth or sh.layers, offload=offload, num_chunks=nc, device=device, tile=tile,
               pin_memory=pin_memory)
    cuda = torch.device(device).type == "cuda"
    step = None
    try:
        t_build = time.perf_counter()
        step = make_step(sh, depth or sh.layers, L, device, dtype, offload=offload, num_chunks=nc, tile=tile,
                         pin_memory=pin_memory)
        out["build_s"] = round(time.perf_counter() - t_build, 2)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            getattr(torch.cuda, "reset_peak_host_memory_stats", lambda: None)()
        t0 = time.perf_counter()
        if cuda:
            loss = step.run()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            out["host_pinned_bytes"] = _pinned_host_bytes()  # offloading's host copies, as the allocator holds them
            out["host_rss_peak_bytes"] = _peak_rss_bytes()  # pageable copies show here (the process's peak so far)
        else:
            from tensor_memory import PeakTensorMemory

            base = live_bytes(step)
            with PeakTensorMemory() as mem:
                loss = step.run()
            peak = base + mem.peak_bytes
        out.update(fit=True, peak_bytes=int(peak), seconds=round(time.perf_counter() - t0, 2), loss=float(loss))
    except torch.OutOfMemoryError as err:
        out.update(fit=False, error=str(err).splitlines()[0][:200])
    finally:
        del step
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            # torch's host allocator rounds each pinned block up to a power of two and keeps it cached: a longer
            # step's larger blocks would be allocated beside this step's (check_longest's 1.25x step)
            _release_pinned_host_blocks()
    return out


def check_windows(L: int, steps: int = 2) -> List[int]:
    """The windows :func:`check_longest` steps at: the predicted ``L`` and (``steps`` 2) 1.25x it, a multiple of 4."""
    return [L, int(1.25 * L) // 4 * 4][:steps]


def check_longest(budget_bytes: float, shape: str = "1b-full", offload: bool = False, device: str = "cuda",
                  num_chunks: Optional[int] = 8, tile: Optional[int] = None, pin_memory: bool = True,
                  steps: int = 2) -> dict:
    """P6: one step at the predicted longest window for ``budget_bytes`` and one at 1.25x it. The model holds when
    the first fits and the second does not (cap the device's memory at ``budget_bytes`` first, e.g.
    ``torch.cuda.set_per_process_memory_fraction(budget_bytes / total)``). ``steps`` 1: the predicted window only
    (``model_holds`` None when it fits: half the check)."""
    L = predict_longest(shape, budget_bytes, offload, num_chunks, tile=tile)
    runs = []
    for n in check_windows(L, steps):  # a line before and after each step: a call killed at its limit shows how far
        print(f"    {shape} L={n}: building and one step", file=sys.stderr, flush=True)
        r = run_step(shape, n, device, offload=offload, num_chunks=num_chunks, tile=tile, pin_memory=pin_memory)
        r["predicted_bytes"], r["predicted_phase"] = predict_bytes(shape, r["L"], offload, num_chunks, tile=tile)
        runs.append(r)
        done = (f"fits, peak {r['peak_bytes'] / 2**30:.1f} GiB, build {r['build_s']} s, step {r['seconds']} s"
                if r["fit"] else f"does not fit: {r['error'][:80]}")
        print(f"    {shape} L={n}: {done} (predicted {r['predicted_bytes'] / 2**30:.1f} GiB)", file=sys.stderr,
              flush=True)
    holds = (runs[0]["fit"] and not runs[1]["fit"]) if steps > 1 else (None if runs[0]["fit"] else False)
    return dict(budget_bytes=budget_bytes, shape=shape, offload=offload, tile=tile, predicted_L=L, runs=runs,
                model_holds=holds, pin_memory=pin_memory)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["measure", "check", "table"], help="measure: CPU steps into the points file; "
                    "check: the depth-4 points the fit must predict; table: fit, checks, GPU model and predictions")
    ap.add_argument("--only", default=None, help="measure only the shapes whose name starts with this")
    ap.add_argument("--points", default=str(POINTS), help="the points file (JSON)")
    ap.add_argument("--gpu-runs", nargs="*", default=(), help="table: also GPU steps (JSON list or JSON lines of "
                    "run_step results, e.g. docs/gpu_suite_h200/longest_points.json) against the GPU model")
    args = ap.parse_args(argv)
    if args.what in ("measure", "check"):
        run_measure(args.only, Path(args.points), "points" if args.what == "measure" else "checks")
        return 0
    try:  # read before the tables print: a wrong file is refused in one line, nothing printed
        runs = [r for f in args.gpu_runs for r in read_runs(Path(f))]
    except RunsFormatError as e:
        print(e, file=sys.stderr)
        return 2
    print_tables(load_points(Path(args.points)), load_points(Path(args.points), "checks"))
    if args.gpu_runs:
        print_gpu_runs(runs, gpu_model(load_points(Path(args.points))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
