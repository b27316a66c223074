"""The memory model's tables (``python benchmarks/memory_model.py table``): the measured points, the CPU fits and
their residuals, the depth checks, the bf16 / fp32 ratios of the replicas, the GPU model, the longest windows it
predicts, and GPU steps against it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

from memory_fit import (
    MODEL_PHASES, NO_MLP, TILE_GPU, Coef, _ratio, _tiled, fit_group, fit_tiled, fitted, gpu_model, group, lstsq,
    phase_value, predict_bytes, predict_longest,
)
from memory_steps import BOUNDED_CHUNK, GB, REPLICAS, SHAPES, TILE, bounded_chunks


def _mib(v: float) -> str:
    return f"{v / 2**20:,.0f}"


def print_points(points: List[dict]) -> None:
    print("| shape | n | L | offload | chunks | MLP tile | base MiB | forward | loss | bwd first layer | bwd layer 0 | "
          "optimizer | peak MiB | moved MiB | s |")
    print("|" + "---|" * 15)
    for p in points:
        v = {ph: _mib(phase_value(p, ph)) for ph in ("forward", "loss", "bwd_first", "bwd_end", "optimizer")}
        print(f"| {p['shape']} | {p['depth']} | {p['L']} | {'on' if p['offload'] else 'off'} | {p['num_chunks']} | "
              f"{p.get('tile') or '-'} | {_mib(p['base'])} | {v['forward']} | {v['loss']} | {v['bwd_first']} | "
              f"{v['bwd_end']} | "
              f"{v['optimizer']} | {_mib(p['peak'])} | {_mib(p['moved_bytes'])} | {p['seconds']} |")


def print_coefficients(title: str, fits: Dict[tuple, Dict[str, Coef]]) -> None:
    print(f"\n{title}\n\n| shape | offload | MLP | phase | A MiB | B MiB/layer | a KiB/token | b KiB/token/layer "
          "| k KiB/row | t KiB/tile row |\n|" + "---|" * 10)
    for key, coefs in fits.items():
        shape, offload, mlp = _parts(key)
        for ph in MODEL_PHASES + ("moved",):
            if ph in coefs:
                c = coefs[ph]
                print(f"| {shape} | {'on' if offload else 'off'} | {mlp} | {ph} | {c.A / 2**20:,.1f} | "
                      f"{c.B / 2**20:,.1f} | {c.a / 2**10:,.2f} | {c.b / 2**10:,.3f} | {c.k / 2**10:,.1f} | "
                      f"{c.t / 2**10:,.2f} |")


def _parts(key: tuple):
    """``(shape, offload, "tiled" or "whole")`` of a fit's key."""
    return key[0], key[1], key[2] if len(key) > 2 else "whole"


def print_residuals(points: List[dict], fits: Dict[tuple, Dict[str, Coef]]) -> None:
    """The largest misfit of each CPU fit over the points it fits, and the L^2 coefficient of a quadratic through
    the deepest points (3 windows: it measures the curvature)."""
    print("\n| shape | offload | MLP | phase | largest misfit MiB | of the value | L^2 coef B/token^2 | "
          "L^2 share at the "
          "largest L |\n|" + "---|" * 8)
    for key, coefs in fits.items():
        shape, offload, mlp = _parts(key)
        pts = group(points, shape, "fp32", offload, TILE if mlp == "tiled" else None)
        deep = [p for p in fitted(pts) if p["depth"] == max(q["depth"] for q in pts) and p["num_chunks"] == 8]
        for ph in [ph for ph in MODEL_PHASES if ph != "bwd_last" and not (mlp == "tiled" and ph in NO_MLP)]:
            res = [(abs(coefs[ph].at(p["depth"], p["L"], p["rows"], p.get("tile") or 0) - phase_value(p, ph)),
                    phase_value(p, ph))
                   for p in (fitted(pts) if ph != "bwd_first" else deep)]
            worst = max(res)
            q = (lstsq([[1, p["L"], p["L"] ** 2] for p in deep], [phase_value(p, ph) for p in deep])[2]
                 if len(deep) >= 3 else float("nan"))  # fewer windows than a quadratic's 3 coefficients: no curvature
            top = max(deep, key=lambda p: p["L"])
            print(f"| {shape} | {'on' if offload else 'off'} | {mlp} | {ph} | {worst[0] / 2**20:.2f} | "
                  f"{worst[0] / worst[1]:.2%} | {q:.3g} | {q * top['L'] ** 2 / phase_value(top, ph):.2%} |")


def print_ratios(points: List[dict]) -> None:
    print("\n| replica | MLP | phase | a bf16 / fp32 | b bf16 / fp32 | B bf16 / fp32 | t bf16 / fp32 |\n|"
          + "---|" * 7)
    for rep in REPLICAS.values():
        r32, r16 = fit_group(group(points, rep.name, "fp32")), fit_group(group(points, rep.name, "bf16"))
        fits = [("whole", r32, r16)]
        if _tiled(points, rep.name, "fp32", False) and _tiled(points, rep.name, "bf16", False):
            fits.append(("tiled", fit_tiled(_tiled(points, rep.name, "fp32", False), r32),
                         fit_tiled(_tiled(points, rep.name, "bf16", False), r16)))
        for mlp, f32, f16 in fits:
            for ph in MODEL_PHASES:
                b = f"{f16[ph].b / f32[ph].b:.3f}" if abs(f32[ph].b) > 1 else "-"
                t = f"{f16[ph].t / f32[ph].t:.3f}" if mlp == "tiled" and abs(f32[ph].t) > 64 else "-"
                print(f"| {rep.name} | {mlp} | {ph} | {_ratio(f16[ph], f32[ph], ph):.3f} | {b} | "
                      f"{f16[ph].B / f32[ph].B:.3f} | {t} |")


def print_predictions(model: Dict[tuple, Dict[str, Coef]]) -> None:
    print("\n| shape | offload | MLP | num_chunks | budget | longest L per window | tokens per step | peaks in | "
          "predicted GB | host GB moved |\n|" + "---|" * 10)
    for key in model:
        shape, offload, mlp = _parts(key)
        tile = TILE_GPU if mlp == "tiled" else None
        for nc in (8, None):
            for budget in (80 * GB, 141 * GB):
                L = predict_longest(shape, budget, offload, nc, model=model, tile=tile)
                by, ph = predict_bytes(shape, L, offload, nc, model=model, tile=tile)
                moved = model[(shape, True)]["moved"].at(SHAPES[shape].layers, L) if offload else 0
                chunks = nc or f"ceil((L+e)/{BOUNDED_CHUNK}) = {bounded_chunks(L, L // 4)}"
                print(f"| {shape} | {'on' if offload else 'off'} | {f'tiles of {tile}' if tile else 'whole'} | "
                      f"{chunks} | {budget / GB:.0f} GB | {L:,} | {2 * L:,} | {ph} | {by / GB:.1f} | "
                      f"{moved / GB:.1f} |")


def print_checks(points: List[dict], checks: List[dict]) -> None:
    """Depth-4 points against the CPU fit of depths 1 and 2, phase by phase (layer 0's backward: the larger of
    ``bwd_last`` and ``bwd_end``)."""
    print("\n| shape | n | L | offload | MLP tile | phase | measured MiB | predicted MiB | predicted / measured |\n|"
          + "---|" * 9)
    for c in checks:
        tile = c.get("tile")
        coefs = fit_group(group(points, c["shape"], "fp32", c["offload"]))
        if tile:
            if not _tiled(points, c["shape"], "fp32", c["offload"]):
                continue
            coefs = fit_tiled(_tiled(points, c["shape"], "fp32", c["offload"]), coefs)
        for ph in ("forward", "loss", "bwd_first", "bwd_end", "optimizer"):
            at = lambda name: coefs[name].at(c["depth"], c["L"], c["rows"], tile or 0)  # noqa: E731
            pred = max(at("bwd_last"), at("bwd_end")) if ph == "bwd_end" else at(ph)
            if ph == "forward" and c["offload"]:  # the stash holds min(depth, 5) inputs; the fit, depth 2's two
                pred += (min(c["depth"], 5) - 2) * coefs["moved"].b * c["L"]
            got = phase_value(c, ph)
            print(f"| {c['shape']} | {c['depth']} | {c['L']} | {'on' if c['offload'] else 'off'} | {tile or '-'} | "
                  f"{ph} | "
                  f"{_mib(got)} | {_mib(pred)} | {pred / got:.4f} |")


def print_tables(points: List[dict], checks: List[dict] = ()) -> None:
    print("Measured (CPU, fp32; bytes live per phase, parameters and AdamW states included)\n")
    print_points([p for p in points if p["dtype"] == "fp32" and p["shape"] in SHAPES])
    cpu = {(k, off): fit_group(group(points, k, "fp32", off)) for k in SHAPES for off in (False, True)}
    cpu.update({(k, off, "tiled"): fit_tiled(_tiled(points, k, "fp32", off), cpu[(k, off)])
                for k in SHAPES for off in (False, True) if _tiled(points, k, "fp32", off)})
    print_coefficients("CPU fit (fp32)", cpu)
    print_residuals(points, cpu)
    if checks:
        print_checks(points, checks)
    print_ratios(points)
    model = gpu_model(points)
    print_coefficients("GPU model (bf16)", model)
    print_predictions(model)


RUN_KEYS = ("shape", "L", "offload", "num_chunks", "fit")
RUN_FILES = "docs/gpu_suite_h200/longest_points.json (a list), docs/gpu_suite_h200/longest_uncapped.jsonl (lines)"


class RunsFormatError(ValueError):
    """A --gpu-runs file that is not run_step results (main prints its one line, exit 2)."""


def _not_runs(path: Path, found: str) -> RunsFormatError:
    return RunsFormatError(f"--gpu-runs {path}: {found}; expected run_step results, a JSON list or JSON lines of "
                           f"objects with {', '.join(RUN_KEYS)} (as {RUN_FILES} are)")


def read_runs(path: Path) -> List[dict]:
    """A file of ``run_step`` results (a JSON list, or JSON lines among other lines) -> the results; anything else
    (a GPU suite's result object, a file cut short) raises :class:`RunsFormatError` naming the file and the format."""
    try:
        text = path.read_text()
    except OSError as e:
        raise _not_runs(path, f"cannot be read ({e.strerror})") from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None  # JSON lines, a log with them, or not JSON
    if isinstance(whole, dict):
        inside = [f"parts.{k}.runs" for k, v in (whole.get("parts") or {}).items() if "runs" in v]
        raise _not_runs(path, "one JSON object" + (f" (a GPU suite's result: its steps are its {', '.join(inside)})"
                                                   if inside else ""))
    runs = whole if isinstance(whole, list) else []
    for n, line in enumerate(text.splitlines() if whole is None else (), 1):
        try:
            runs += [json.loads(line)] if line.startswith("{") else []
        except json.JSONDecodeError as e:
            raise _not_runs(path, f"line {n} is not JSON ({e.msg})") from None
    bad = next((i for i, r in enumerate(runs) if not isinstance(r, dict) or not set(RUN_KEYS) <= set(r)), None)
    if not runs or bad is not None:
        raise _not_runs(path, "no run_step result in it" if not runs else f"entry {bad} is not a run_step result")
    return runs


def print_gpu_runs(runs: List[dict], model: Dict[tuple, Dict[str, Coef]]) -> None:
    """GPU steps that fit (``run_step`` results: allocated peak) against this model's prediction."""
    print("\n| shape | L | offload | chunks | MLP tile | GPU peak GB | predicted GB | measured / predicted | "
          "peaks in |\n|"
          + "---|" * 9)
    for r in (r for r in runs if r.get("fit")):
        pred, phase = predict_bytes(r["shape"], r["L"], r["offload"], r["num_chunks"], model=model, tile=r.get("tile"))
        print(f"| {r['shape']} | {r['L']} | {'on' if r['offload'] else 'off'} | {r['num_chunks']} | "
              f"{r.get('tile') or '-'} | {r['peak_bytes'] / GB:.2f} | {pred / GB:.2f} | "
              f"{r['peak_bytes'] / pred:.3f} | {phase} |")
