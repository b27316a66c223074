"""The GPU figures in one command, planned to fit a time budget: one JSON and one markdown table.

    PYTHONPATH=. python benchmarks/gpu_suite.py --budget 540 --out DIR      # on one H100 / H200
    PYTHONPATH=. python benchmarks/gpu_suite.py --smoke                     # every part at tiny shapes on the CPU (CI)
    PYTHONPATH=. python benchmarks/gpu_suite.py --parts recipe eval         # chosen parts only

Parts (what each measures: :mod:`gpu_parts`), in the order they run, with the seconds each is planned to take on one
H100 / H200 (``PLANNED_S``: from the 2026-11-25 H100 run where the part ran then, else estimated from its FLOPs and
the steps it runs; the JSON records every part's actual seconds, so the plan can be corrected):

- ``loss`` (P1): alpha 0.1 / 0 time and memory of the fused loss at the 1B shape at 8k;
- ``longest`` (P6): the predicted longest window of the 1B shape on an 80 GB card, and 1.25x it;
- ``longest_8b`` (P6): the same for the 8B LoRA shape with the tiled MLP and offloading, under a memory cap of
  ``--longest-8b-gb`` (default 40: a cheap point of the model; 80, the 80 GB claim itself, takes a command alone
  and, to fit one call, ``--longest-steps 1``: the predicted window only);
- ``recipe`` (P4): the ~1.5B / 4k recipe against torchtune, eager and compiled, tokens/s and MFU;
- ``eval`` (P3): ``longshort`` against ``hf`` at 8k / 16k / 32k on a 7B-width checkpoint (ours also with ``hf``'s
  attention layout; SDPA alone by layout; one profiled request a way at 32k, kernel by kernel);
- ``fused_ce``: ours at alpha 0 against Liger's and Cut Cross-Entropy's fused linear cross-entropy (optional
  packages: a part whose package does not import says so in its row).

``--budget S`` runs the parts in that order while the planned time of the next one fits in what is left (a part that
would not fit is skipped and listed as such); a budget smaller than every part's plan is refused before anything runs,
as is a size no part could run with (a budget, ``--peak-tflops``, ``--eval-rounds``, ``--eval-layers`` or
``--longest-8b-gb`` not above 0, a negative ``--longest-chunks``, a ``--memory-points`` file that is not there). Each
part's result is written as soon as it ends, so a command stopped at its time limit still returns the parts that
finished. A part that fails (out of memory, a missing package) is recorded with its error and the suite goes on. The
real-model parts (``recipe_smollm2``, ``eval_smollm2``) run only when named, with SmolLM2 converted on the machine
(``docs/real_model.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import gpu_parts  # noqa: E402  (after the path insert: benchmarks/ is not a package)
import gpu_loss_parts  # noqa: E402

PARTS = {
    "loss": gpu_loss_parts.part_loss,
    "longest": gpu_loss_parts.part_longest,
    "longest_8b": gpu_loss_parts.part_longest_8b,
    "recipe": gpu_parts.part_recipe,
    "eval": gpu_parts.part_eval,
    "fused_ce": gpu_loss_parts.part_fused_ce,
    "recipe_smollm2": lambda smoke, work, opts: gpu_parts.part_recipe(smoke, work, opts, real=True),
    "eval_smollm2": lambda smoke, work, opts: gpu_parts.part_eval(smoke, work, opts, real=True),
}
DEFAULT_PARTS = ("loss", "longest", "recipe", "eval", "fused_ce", "longest_8b")
# Planned seconds on one H100 / H200: each part's measured time on one H200 (2026-11-27, docs/gpu_suite_h200) with a
# margin: loss 30 s, longest 73 s at bounded chunks (its 161k step alone 43 s), recipe 121 s (two eager and two
# compiled runs: 23-28 s each, compile included; 139 s on 2026-12-04), eval 19 s (8 layers), fused_ce 18 s. The
# real-model parts: the 2026-11-25 H100 run (56 s for both). longest_8b at its default 40 GB cap: 134 s measured on
# one H200 (2026-12-04: build 9 s, the 53,248-token step 42 s, the 66,560 one 67 s with 72 GB pinned). Above 40 GB
# (--longest-8b-gb 80: 149,504 tokens a window): its first step measured 217 s plus 17 s to build (pageable
# offloading, docs/gpu_suite_h200/run_2026-12-04b), so both steps (the 1.25x one ~1.56x as long, attention's L^2)
# plan at 640 s, more than one call's 600 s: ``--longest-steps 1`` (the predicted window only) plans at 300 s.
PLANNED_S = {"loss": 40, "longest": 100, "recipe": 180, "eval": 45, "fused_ce": 30, "longest_8b": 180,
             "recipe_smollm2": 60, "eval_smollm2": 40}
PLANNED_LONGEST_8B_ABOVE_40GB_S = {2: 640, 1: 300}  # longest_8b above a 40 GB cap, by --longest-steps
SMOKE_PARTS = DEFAULT_PARTS  # every default part has a tiny CPU shape


def plan(parts, budget, longest_8b_gb: float = 40, longest_steps: int = 2):
    """``(planned, refusal)``: the parts' planned seconds, and a one-line refusal when even the smallest exceeds
    the budget (``None`` otherwise). ``longest_8b`` above a 40 GB cap: :data:`PLANNED_LONGEST_8B_ABOVE_40GB_S`."""
    planned = {p: PLANNED_S[p] for p in parts}
    if "longest_8b" in planned and longest_8b_gb > 40:
        planned["longest_8b"] = PLANNED_LONGEST_8B_ABOVE_40GB_S[longest_steps]
    if budget is not None and budget < min(planned.values()):
        listing = ", ".join(f"{p} {s} s" for p, s in planned.items())
        return planned, f"--budget {budget:g} s is smaller than the smallest part; planned: {listing}"
    return planned, None


def arg_refusal(args):
    """A one-line refusal of a size the parts could not run with (``None`` when all are sound): checked before any
    part runs, so a bad value is not met only by the part that reads it, after the earlier parts spent their time
    (``--peak-tflops -3`` gave a negative MFU, ``--eval-rounds 0`` failed the eval part after the others ran)."""
    positive = {"--budget": args.budget, "--peak-tflops": args.peak_tflops, "--longest-8b-gb": args.longest_8b_gb,
                "--eval-layers": args.eval_layers, "--eval-rounds": args.eval_rounds}
    for flag, value in positive.items():
        if value is not None and not value > 0:
            return f"{flag} {value:g}: must be above 0"
    if args.longest_chunks < 0:
        return f"--longest-chunks {args.longest_chunks}: must be 0 (bounded chunks) or a positive chunk count"
    if args.memory_points is not None and not Path(args.memory_points).is_file():
        return f"--memory-points {args.memory_points}: no such file; pass a points JSON (benchmarks/memory_model.py)"
    return None


def _write(out: Path, report: dict, md: list) -> None:
    (out / "gpu_suite.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "gpu_suite.md").write_text("\n".join(md) + "\n")


def _device_line(smoke: bool):
    import torch

    if smoke:
        return "cpu", f"cpu; torch {torch.__version__}"
    import subprocess

    name = torch.cuda.get_device_name()
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "?"
    return name, f"{name} (driver, memory: {driver}); torch {torch.__version__}, CUDA {torch.version.cuda}"


def _parser() -> argparse.ArgumentParser:
    """The suite's command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=None, choices=list(PARTS),
                    help=f"default: {', '.join(DEFAULT_PARTS)}")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: run the parts in order while the next one's planned time fits")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: checks that every part runs")
    ap.add_argument("--out", type=Path, default=None, help="folder for gpu_suite.json / gpu_suite.md")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (checkpoints, logs); default: a temp dir")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (default: from its name)")
    ap.add_argument("--eval-layers", type=int, default=8, help="depth of the 7B-width eval checkpoint (7B: 32)")
    ap.add_argument("--eval-rounds", type=int, default=5, help="interleaved timings per model and length")
    ap.add_argument("--longest-offload", type=int, default=0, choices=(0, 1),
                    help="longest: with activation offloading (1) or without (0)")
    ap.add_argument("--longest-chunks", type=int, default=0,
                    help="longest: the loss's num_chunks (default 0: bounded, ceil((L + e) / 1024) chunks)")
    ap.add_argument("--longest-8b-gb", type=float, default=40,
                    help="longest_8b: the memory cap in GB (1e9 bytes) the 8B LoRA's longest window is predicted for")
    ap.add_argument("--offload-pinned", type=int, default=1, choices=(0, 1),
                    help="longest parts with offloading: host copies in pinned (1, torchtune's default) or pageable "
                         "(0) memory; a step whose pinned blocks would not fit this machine's memory is refused")
    ap.add_argument("--longest-steps", type=int, default=2, choices=(1, 2),
                    help="longest parts: the predicted window and 1.25x it (2), or the predicted window only (1)")
    ap.add_argument("--memory-points", default=None, help="longest: the memory model's points file (default its own)")
    return ap


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    refusal = arg_refusal(args)
    if refusal:
        ap.error(refusal)
    parts = args.parts or list(SMOKE_PARTS if args.smoke else DEFAULT_PARTS)
    if args.smoke and set(parts) - set(SMOKE_PARTS):
        ap.error(f"--smoke runs {', '.join(SMOKE_PARTS)} only: the real-model parts need a GPU")
    planned, refusal = plan(parts, args.budget, args.longest_8b_gb, args.longest_steps)
    if refusal:
        ap.error(refusal)
    # Without expandable segments the allocator reserved 10% over the allocated bytes at the 1B / 161k step (89.2 vs
    # 80.8 GB, H200 2026-11-27): a step the model fits failed under an 80 GB cap. Before CUDA starts; a user's wins.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    import torch

    if not args.smoke and not torch.cuda.is_available():
        ap.error("no CUDA device: the suite's shapes need a GPU; use --smoke to check it on a CPU")
    refusal = None if args.smoke else gpu_loss_parts.host_memory_refusal(parts, args)
    if refusal:
        ap.error(refusal)
    out = args.out or (REPO / "benchmarks" / "results" / ("gpu_suite_smoke" if args.smoke else "gpu_suite"))
    out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_suite_"))
    work.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        torch.set_num_threads(1)  # tiny ops: one thread avoids intra-op sync on a shared CPU
    device, line = _device_line(args.smoke)
    report = {"device": device, "device_line": line, "smoke": args.smoke, "torch": torch.__version__,
              "budget_s": args.budget, "planned_s": planned, "parts": {}, "skipped": {}}
    md = [f"# GPU suite{' (smoke: tiny shapes on CPU, figures meaningless)' if args.smoke else ''}", line]
    t_start = time.perf_counter()
    for part in parts:
        left = None if args.budget is None else args.budget - (time.perf_counter() - t_start)
        if left is not None and planned[part] > left:
            report["skipped"][part] = f"planned {planned[part]} s, {left:.0f} s of the budget left"
            md += ["", f"## {part}: skipped ({report['skipped'][part]})"]
            _write(out, report, md)
            print(f"  {part}: skipped ({report['skipped'][part]})", file=sys.stderr, flush=True)
            continue
        print(f"  {part}: start (planned {planned[part]} s)", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            res = PARTS[part](args.smoke, work, args)
        except Exception as err:  # one part failing (out of memory, a missing package) must not sink the others
            res = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(),
                   "markdown": f"failed: {type(err).__name__}: {str(err)[:400]}"}
            print(res["traceback"], file=sys.stderr, flush=True)
        gpu_parts.free("cpu" if args.smoke else "cuda")
        res["seconds"] = time.perf_counter() - t0
        report["parts"][part] = res
        md += ["", f"## {part} ({res['seconds']:.0f} s; planned {planned[part]} s)", "", res["markdown"]]
        _write(out, report, md)
        print(f"  {part}: {res['seconds']:.1f} s", file=sys.stderr, flush=True)
    report["total_s"] = time.perf_counter() - t_start
    _write(out, report, md)
    print("\n".join(md))
    print(f"\nwrote {out / 'gpu_suite.json'} and {out / 'gpu_suite.md'} ({report['total_s']:.0f} s)")
    failed = [p for p, r in report["parts"].items() if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
