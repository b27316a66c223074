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
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional

import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from memory_steps import (  # noqa: E402  (the sibling module, found from any folder)
    BOUNDED_CHUNK, GB, POINTS, REPLICAS, SHAPES, TILE, TILE_CHECK, bounded_chunks, live_bytes, load_points, loss_rows,
    make_step, run_measure,
)

# ---------------------------------------------------------------------------------------------- the fit
MODEL_PHASES = ("forward", "loss", "bwd_head", "bwd_first", "bwd_last", "bwd_end", "optimizer")
FREE_OFFLOAD_STASH = 3  # offloading keeps the 5 latest layer inputs during the forward: 3 more than at depth 2
TILE_GPU = 4096  # the tiled_mlp_tokens the GPU predictions assume: the 8B width, as ALST's ceil(tokens / hidden) tiles
NO_MLP = ("loss", "bwd_head")  # phases that run no layer: the tiled fits take them from the untiled ones


@dataclass(frozen=True)
class Coef:
    """``bytes = A + B n + L (a + b n) + k rows + t tile`` for ``n`` layers, ``L`` tokens per window, ``rows`` loss
    rows and ``tile`` the tiled MLP's rows a tile (0: untiled)."""

    A: float
    B: float
    a: float
    b: float
    k: float = 0.0
    t: float = 0.0

    def at(self, n: int, L: int, rows: int = 0, tile: int = 0) -> float:
        return self.A + self.B * n + L * (self.a + self.b * n) + self.k * rows + self.t * tile


def lstsq(X: List[List[float]], y: List[float]) -> List[float]:
    """Least-squares coefficients of ``y ~ X`` (columns scaled first, so bytes and tokens mix well)."""
    import numpy as np

    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    sol, *_ = np.linalg.lstsq(X / scale, y, rcond=None)
    return [float(v) for v in sol / scale]


def phase_value(point: dict, phase: str) -> float:
    """A point's bytes in a model phase: ``bwd_first`` is the backward of its deepest layer (every layer input still
    held, no layer gradient yet), ``bwd_end`` that of layer 0 (one input, every gradient, the embedding's)."""
    name = {"bwd_first": f"bwd_layer{point['depth'] - 1}", "bwd_end": "bwd_layer0"}.get(phase, phase)
    return point["phases"][name]


def fitted(points: List[dict]) -> List[dict]:
    """The points a fit uses: all but each depth's shortest window. A phase's peak is the largest of a few lines in
    ``L`` (which tensor is on top at the peak's moment); the longest windows show the one that rises fastest, the
    one that sets the peak at long windows (at the 1B shape, depth 2, the deepest layer's backward rises 0.34
    MiB per token from L 256 to 512 and 0.56 from 512 on)."""
    shortest = {d: min(p["L"] for p in points if p["depth"] == d) for d in {p["depth"] for p in points}}
    return [p for p in points if p["L"] > shortest[p["depth"]]]


def fit_linear(points: List[dict], phase: str) -> Coef:
    """``A + B n + L (a + b n) (+ k rows for the loss)`` by least squares over depths and windows (:func:`fitted`)."""
    points = fitted(points)
    with_rows = phase == "loss" and len({round(p["rows"] / p["L"], 6) for p in points}) > 1
    X = [[1, p["depth"], p["L"], p["depth"] * p["L"]] + ([p["rows"]] if with_rows else []) for p in points]
    c = lstsq(X, [phase_value(p, phase) for p in points])
    return Coef(*c[:4], k=c[4] if with_rows else 0.0)


def fit_anchored(points: List[dict], phase: str, B: float, b: float) -> Coef:
    """``A`` and ``a`` from the deepest measured points with the per-layer increment ``B + b L`` given."""
    deep = max(p["depth"] for p in points)
    pts = [p for p in fitted(points) if p["depth"] == deep and p["num_chunks"] == 8]
    A, a = lstsq([[1, p["L"]] for p in pts], [phase_value(p, phase) - deep * (B + b * p["L"]) for p in pts])
    return Coef(A, B, a, b)


def fit_group(points: List[dict]) -> Dict[str, Coef]:
    """The coefficients of every model phase for the points of one shape, dtype and offload setting.

    Fitted: ``forward``, ``loss``, ``bwd_head``, ``bwd_end`` and ``optimizer`` (:func:`fit_linear`). Built from
    them, because the backward walks the layers from the deepest (all inputs held, no layer gradient) to layer 0
    (one input, every other layer's gradient) and a point of depth 1 or 2 shows only the ends: ``bwd_first``, the
    deepest layer's backward, takes a layer's parameters and AdamW states (``pl``, from ``base``) plus its held
    input (the forward's ``b``; none with offloading) per layer, anchored at depth 2 (depth 1's only layer is also
    layer 0, with the embedding's gradient); ``bwd_last``, layer 0's backward at its transient's peak, is
    ``bwd_first`` with the held inputs but its own traded for every other layer's gradient (``Gr``, the per-layer
    bytes ``bwd_end`` adds beyond ``pl``). Offloading: the forward is anchored at depth 2 with ``pl`` a layer (it
    holds the 5 latest inputs, added in :func:`gpu_model`), and ``moved`` fits the bytes moved to host memory."""
    out = {ph: fit_linear(points, ph) for ph in ("forward", "loss", "bwd_head", "bwd_end", "optimizer")}
    pl = lstsq([[1, p["depth"]] for p in points], [p["base"] for p in points])[1]
    offload = points[0]["offload"]
    held = 0.0 if offload else out["forward"].b
    first = out["bwd_first"] = fit_anchored(points, "bwd_first", pl, held)
    grads = out["bwd_end"].B - pl
    out["bwd_last"] = Coef(first.A - grads, pl + grads, first.a + held, 0.0)
    if offload:
        out["forward"] = fit_anchored(points, "forward", pl, 0.0)
        m = lstsq([[1, p["depth"], p["L"], p["depth"] * p["L"]] for p in points], [p["moved_bytes"] for p in points])
        out["moved"] = Coef(*m)
    return out


def group(points: List[dict], shape: str, dtype: str = "fp32", offload: bool = False,
          tile: Optional[int] = None) -> List[dict]:
    return [p for p in points if p["shape"] == shape and p["dtype"] == dtype and p["offload"] == offload
            and p.get("tile") == tile]


def fit_tiled(points: List[dict], untiled: Dict[str, Coef]) -> Dict[str, Coef]:
    """The tiled MLP's coefficients for one shape, dtype and offload setting: :func:`fit_group` over its points at
    :data:`TILE` (``A`` holding the tile's bytes), the phases without a layer from the ``untiled`` fit, and per
    phase ``t``, the bytes a tile row adds, from the points at :data:`TILE_CHECK` against their twins at
    :data:`TILE` (``bwd_last`` takes ``bwd_first``'s); ``A`` then excludes the tile."""
    fits = fit_group([p for p in points if p.get("tile") == TILE])
    fits.update({ph: untiled[ph] for ph in NO_MLP})
    twins = {(p["depth"], p["L"]): p for p in points if p.get("tile") == TILE}
    checks = [(c, twins[(c["depth"], c["L"])]) for c in points if c.get("tile") == TILE_CHECK]
    for ph in (ph for ph in MODEL_PHASES if ph not in NO_MLP):
        src = "bwd_first" if ph == "bwd_last" else ph  # bwd_last is built, not measured
        t = (sum(phase_value(c, src) - phase_value(tw, src) for c, tw in checks) / len(checks) / (TILE_CHECK - TILE)
             if checks else 0.0)
        fits[ph] = replace(fits[ph], A=fits[ph].A - t * TILE, t=t)
    return fits


def _ratio(r16: Coef, r32: Coef, phase: str) -> float:
    """The replica's bf16 / fp32 ratio of ``a`` (the optimizer holds no activations: its parameter-dtype 0.5)."""
    return 0.5 if phase == "optimizer" else r16.a / r32.a


def gpu_model(points: Optional[List[dict]] = None) -> Dict[tuple, Dict[str, Coef]]:
    """``{(shape, offload): {phase: Coef}}`` in bf16 on a GPU, from the CPU fp32 fits (see the module doc): ``A``,
    ``B``, ``b`` halve, ``a`` takes the replica's bf16 / fp32 ratio of the same phase, ``k`` gains ``2 vocab``;
    with offloading, the moved bytes halve and the forward holds 3 more layer inputs than at depth 2 (torchtune's
    5-tensor stash at full depth). Where tiled-MLP points exist, ``(shape, offload, "tiled")`` too (:func:`fit_tiled`),
    with ``t`` halved: a tile's tensors (the MLP's gate, up, product and their gradients) are in the parameter dtype.
    The replica's bf16 ``t`` is not used: at its peak no tile was alive (``t`` measured ~0), which would make the GPU
    tile free; halving the fp32 ``t`` charges it in full, the cautious side."""
    points = load_points() if points is None else points
    out = {}
    for key, shape in SHAPES.items():
        rep = REPLICAS[key].name
        r32, r16 = fit_group(group(points, rep, "fp32")), fit_group(group(points, rep, "bf16"))
        rep32, rep16 = _tiled(points, rep, "fp32", False), _tiled(points, rep, "bf16", False)
        tiled_rep = bool(rep32 and rep16)
        if tiled_rep:
            t32, t16 = fit_tiled(rep32, r32), fit_tiled(rep16, r16)
        for offload in (False, True):
            cpu = fit_group(group(points, key, "fp32", offload))
            out[(key, offload)] = _to_gpu(cpu, shape, r16, r32, offload)
            tiled = _tiled(points, key, "fp32", offload)
            if tiled_rep and tiled:
                out[(key, offload, "tiled")] = _to_gpu(fit_tiled(tiled, cpu), shape, t16, t32, offload, cpu)
    return out


def _tiled(points: List[dict], shape: str, dtype: str, offload: bool) -> List[dict]:
    """The tiled points of one group, or none while they cannot be fitted yet (a measurement under way): two
    windows past the shortest at depths 1 and 2, and a point at :data:`TILE_CHECK`."""
    grid = group(points, shape, dtype, offload, TILE)
    check = group(points, shape, dtype, offload, TILE_CHECK)
    ready = check and all(sum(p["depth"] == d for p in fitted(grid)) >= 2 for d in (1, 2))
    return grid + check if ready else []


def _to_gpu(cpu: Dict[str, Coef], shape, r16: Dict[str, Coef], r32: Dict[str, Coef], offload: bool,
            moved_from: Optional[Dict[str, Coef]] = None) -> Dict[str, Coef]:
    """One CPU fp32 fit as the bf16 GPU model (:func:`gpu_model`); ``moved_from``: the fit whose offloaded bytes
    apply (a tiled MLP moves the same layer inputs)."""
    gpu = {ph: Coef(c.A / 2, c.B / 2, c.a * _ratio(r16[ph], r32[ph], ph), c.b / 2,
                    c.k + 2 * shape.vocab if c.k else 0.0, c.t / 2)
           for ph, c in cpu.items() if ph in MODEL_PHASES}
    if offload:
        m = (moved_from or cpu)["moved"]
        gpu["moved"] = Coef(m.A / 2, m.B / 2, m.a / 2, m.b / 2)
        gpu["forward"] = replace(gpu["forward"], a=gpu["forward"].a + FREE_OFFLOAD_STASH * m.b / 2)
    return gpu


_MODEL: Dict[str, Dict[tuple, Dict[str, Coef]]] = {}


def _model() -> Dict[tuple, Dict[str, Coef]]:
    if "gpu" not in _MODEL:
        _MODEL["gpu"] = gpu_model()
    return _MODEL["gpu"]


def predict_bytes(shape: str, L: int, offload: bool = False, num_chunks: Optional[int] = 8,
                  depth: Optional[int] = None, model: Optional[Dict] = None, tile: Optional[int] = None):
    """``(bytes, phase)``: the predicted peak of one bf16 GPU step of ``shape`` (a key of :data:`SHAPES`) at window
    ``L`` (``depth`` layers, default the full model), the phase where it peaks. ``num_chunks`` None: the bounded
    choice :func:`bounded_chunks`; ``tile``: the MLP tiled over that many rows (None: untiled)."""
    e = L // 4
    nc = bounded_chunks(L, e) if num_chunks is None else num_chunks
    coefs = (model or _model())[(shape, offload) if tile is None else (shape, offload, "tiled")]
    n = depth or SHAPES[shape].layers
    rows = loss_rows(L, e, nc)
    best = max((coefs[ph].at(n, L, rows, min(tile or 0, 2 * L)), ph) for ph in MODEL_PHASES)
    return int(best[0]), best[1]


def predict_longest(shape: str, budget_bytes: float, offload: bool = False, num_chunks: Optional[int] = 8,
                    headroom: float = 0.05, multiple: int = 256, model: Optional[Dict] = None,
                    tile: Optional[int] = None) -> int:
    """The longest window ``L`` (a multiple of ``multiple``) whose predicted peak is at most ``(1 - headroom)`` of
    ``budget_bytes`` (the headroom is what the CUDA caching allocator holds beyond the allocated bytes: block
    rounding, fragmentation). 0 when even ``multiple`` does not fit."""
    cap = (1 - headroom) * budget_bytes
    fits = lambda L: predict_bytes(shape, L, offload, num_chunks, model=model, tile=tile)[0] <= cap  # noqa: E731
    lo, hi = 0, multiple
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > 2**24:
            raise ValueError(f"{shape}: the model predicts no limit below {2**24} tokens; the fit is wrong")
    while hi - lo > multiple:
        mid = (lo + hi) // 2 // multiple * multiple
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


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
    from memory_tables import print_gpu_runs, print_tables, read_runs  # deferred: it imports this module

    print_tables(load_points(Path(args.points)), load_points(Path(args.points), "checks"))
    if args.gpu_runs:
        print_gpu_runs([r for f in args.gpu_runs for r in read_runs(Path(f))], gpu_model(load_points(Path(args.points))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
