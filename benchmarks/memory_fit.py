"""The memory model's fit (``memory_model.py``'s, which re-exports these names): the per-phase fits of the CPU points,
the bf16 GPU model converted from them, and the peak and longest window it predicts. Imported by ``memory_model.py``
and by ``memory_tables.py``, which imports nothing of ``memory_model.py`` (one way: model -> tables -> fit)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from memory_steps import (  # noqa: E402  (the sibling module, found from any folder)
    REPLICAS, SHAPES, TILE, TILE_CHECK, bounded_chunks, load_points, loss_rows,
)
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
