"""``compile: True`` against eager on this CPU: steady tokens/s, compile time apart, and the losses, for our recipe
(per RoPE method) and torchtune's ``full_finetune_single_device`` (its own ``compile`` key), same model, data and
tokens per step as ``benchmarks/recipe_throughput.py`` (whose setups, configs and overrides this script reuses).

    PYTHONPATH=. python benchmarks/compile_throughput.py --model tiny --seq-len 256 --batch 2 --steps 12
    PYTHONPATH=. python benchmarks/compile_throughput.py --model smollm2 --seq-len 1024 --batch 1 --steps 8 --warmup 3
    PYTHONPATH=. python benchmarks/compile_throughput.py --model smollm2 --seq-len 256 --steps 4 --warmup 1 \
        --methods default yarn clex --no-torchtune          # the 4-step loss check of every method

Each run is its own ``tune run`` process; a compiled run gets a fresh inductor cache folder
(``TORCHINDUCTOR_CACHE_DIR``), so it pays its whole compile, as a first run does. Per recipe and round the eager run
and the compiled run follow each other (order alternated by round); the table gives medians over ``--rounds``.

- steady tokens/s: the mean of the steps after the first ``--warmup`` (each recipe's own step log);
- compile s: the compiled run's first ``--warmup`` steps' time minus the eager run's (what compiling added; a graph
  compiled after the warm-up, e.g. CLEX's t = 1 graph, lands in the steady steps instead); ``logged``: the time of
  the layer calls that compiled, as our recipe logs it (steadier on a loaded machine);
- loss gap: the largest ``|compiled - eager| / |eager|`` over the steps: the same seed and data give the same losses
  up to the order in which compiled kernels sum.

``--methods``: our recipe's RoPE methods (``config``: the config's own model; otherwise ``model.method`` of the
SmolLM2 config's ``rope_scaled`` node, or the tiny config's ``hf_decoder`` wrapped in a ``rope_scaled`` node of that
method, scaled 4x from the checkpoint's length). torchtune runs the config's model (plain RoPE for tiny, YaRN for
SmolLM2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

import recipe_throughput as rt


def method_overrides(model: str, method: str, shape: rt.Shape) -> list:
    """Our recipe's overrides for RoPE ``method`` (``config``: none)."""
    if method == "config":
        return []
    if model == "smollm2":
        return [f"model.method={method}"]
    orig = max(512, shape.seq_len)  # the tiny checkpoint's positions (recipe_throughput.tiny_setup)
    return ["model._component_=torchtune_longshort.models.rope_scaled", f"model.method={method}",
            f"model.max_seq_len={4 * orig}", "~model.checkpoint_dir",
            "model.model._component_=torchtune_longshort.models.hf_decoder",
            "model.model.checkpoint_dir=${checkpoint_dir}"]


def ours_steps(work: Path, tag: str, tokens_per_step: int):
    """(losses, step seconds) from our recipe's metrics.jsonl."""
    rows = [json.loads(line) for line in (work / tag / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "tokens_per_second" in r]
    return [r["loss"] for r in rows], [tokens_per_step / r["tokens_per_second"] for r in rows]


def torchtune_steps(work: Path, tag: str, tokens_per_step: int):
    """(losses, step seconds) from torchtune's DiskLogger file."""
    text = next((work / f"tt_logs_{tag}").glob("log_*.txt")).read_text()
    losses = [float(x) for x in re.findall(r"\bloss:([0-9.eE+-]+)", text)]
    tps = [float(x) for x in re.findall(r"tokens_per_second_per_gpu:([0-9.eE+-]+)", text)]
    return losses, [tokens_per_step / t for t in tps]


def one_run(work: Path, setup, data, shape, args, recipe: str, compiled: bool, tag: str, env: dict):
    """One ``tune run``: (losses, step seconds, the compile lines of our recipe's log)."""
    cache = work / f"inductor_{tag}"
    env = dict(env, TORCHINDUCTOR_CACHE_DIR=str(cache))
    if recipe == "torchtune":
        cfg = OmegaConf.load(rt.torchtune_config(work, setup, data, shape, tag))
        cfg.compile = compiled  # torchtune's own key: compile_model (per layer) + compile_loss
        path = work / f"torchtune_{tag}.yaml"
        path.write_text(OmegaConf.to_yaml(cfg))
        rt.run([rt.TUNE, "run", "full_finetune_single_device", "--config", str(path)], env, work / f"{tag}.log")
        out = torchtune_steps(work, tag, shape.tokens_per_step)
    else:
        over = rt.ours_overrides(work, setup, data, shape, args.alpha, tag,
                                 [*method_overrides(args.model, recipe, shape), f"compile={compiled}",
                                  *args.recipe_overrides])
        rt.run([rt.TUNE, "run", "torchtune_longshort/recipes/longshort_finetune.py", "--config", setup.our_config,
                *over], env, work / f"{tag}.log")
        out = ours_steps(work, tag, shape.tokens_per_step)
    # what this run wrote and nothing reads again: its kernels and its checkpoints (1.6 GB a SmolLM2 run)
    for folder in [cache, work / f"tt_out_{tag}", *(work / tag).glob("step_*")]:
        shutil.rmtree(folder, ignore_errors=True)
    text = (work / f"{tag}.log").read_text().replace("\r", "\n")
    notes = re.findall(r"compile: [^\n]*", text) if recipe != "torchtune" else []  # also after tqdm's bar
    return (*out, notes)


def compare(eager, compiled, warmup: int) -> dict:
    """One (eager, compiled) pair of runs: steady tokens/s each, compile seconds, the largest relative loss gap."""
    (le, se, _), (lc, sc, notes) = eager, compiled
    steady = lambda s: len(s[warmup:]) / sum(s[warmup:])  # noqa: E731  (steps per second)
    gap = max(abs(c - e) / abs(e) for e, c in zip(le, lc))
    logged = sum(float(x) for x in re.findall(r"compiled .*?\(([0-9.]+) s", "\n".join(notes)))  # our recipe's lines
    return {"steady_steps_per_s": [steady(se), steady(sc)], "compile_s": sum(sc[:warmup]) - sum(se[:warmup]),
            "logged_compile_s": logged if notes else None, "loss_gap": gap, "losses": [le, lc], "notes": notes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    ap.add_argument("--vocab", type=int, default=512, help="tiny: output vocabulary")
    ap.add_argument("--dim", type=int, default=256, help="tiny: model width")
    ap.add_argument("--methods", nargs="+", default=["config"], help="our recipe's RoPE methods (module doc)")
    ap.add_argument("--no-torchtune", action="store_true", help="only our recipe")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--recipe-overrides", nargs="*", default=[], help="extra key=value overrides for our recipe")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2, help="our dual-window samples per step (torchtune gets 2x this)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for every run (default: torch's)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.out and Path(args.out).exists() and (not Path(args.out).is_dir() or any(Path(args.out).iterdir())):
        # each run's checkpoints and kernels are deleted after it, by name: only in a folder of this script's own
        ap.error(f"--out {args.out!r} exists and is not an empty folder; give a new or empty one (its runs' "
                 "checkpoints and kernel caches are deleted by name after each run)")
    work = Path(args.out or tempfile.mkdtemp(prefix="compile_tp_"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(rt.REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HOME=str(work / "hf_home"))
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    shape = rt.Shape(vocab=args.vocab if args.model == "tiny" else 49152, dim=args.dim, seq_len=args.seq_len,
                     batch=args.batch, steps=args.steps, dtype=args.dtype)
    setup = rt.tiny_setup(work, shape) if args.model == "tiny" else rt.smollm2_setup(work, shape)
    data = rt.prepare_data(work)
    recipes = ([] if args.no_torchtune else ["torchtune"]) + list(args.methods)
    pairs = {r: [] for r in recipes}
    for rnd in range(args.rounds):
        for recipe in recipes:
            runs = {}
            for compiled in ((False, True) if rnd % 2 == 0 else (True, False)):
                tag = f"{recipe}_{'compile' if compiled else 'eager'}_r{rnd}"
                runs[compiled] = one_run(work, setup, data, shape, args, recipe, compiled, tag, env)
                print(f"  {tag} done", file=sys.stderr)
            pairs[recipe].append(compare(runs[False], runs[True], args.warmup))
    report(args, setup, shape, pairs, work)


def report(args, setup, shape, pairs: dict, work: Path) -> None:
    """The markdown table (medians over rounds) and results.json."""
    print(f"{setup.label}, L={args.seq_len}, {shape.tokens_per_step} model tokens/step, {args.dtype}, {args.steps} "
          f"steps ({args.warmup} warm-up), alpha {args.alpha}, median of {args.rounds} round(s), {os.cpu_count()} "
          f"CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', args.threads or 'unset')}")
    print("| recipe (RoPE) | eager tokens/s | compile tokens/s | compile / eager | compile s | compile s (logged) | "
          "max rel loss gap |")
    print("|---|---|---|---|---|---|---|")
    summary = {"config": vars(args), "model": setup.label, "per_recipe": {}}
    for recipe, runs in pairs.items():
        tps_e = rt.median([r["steady_steps_per_s"][0] for r in runs]) * shape.tokens_per_step
        tps_c = rt.median([r["steady_steps_per_s"][1] for r in runs]) * shape.tokens_per_step
        comp, gap = rt.median([r["compile_s"] for r in runs]), max(r["loss_gap"] for r in runs)
        name = "torchtune full_finetune_single_device" if recipe == "torchtune" else f"longshort ({recipe})"
        logged = [r["logged_compile_s"] for r in runs if r["logged_compile_s"] is not None]
        logged_s = f"{rt.median(logged):.1f}" if logged else "-"
        print(f"| {name} | {tps_e:.0f} | {tps_c:.0f} | {tps_c / tps_e:.3f} | {comp:.1f} | {logged_s} | {gap:.1e} |")
        summary["per_recipe"][recipe] = {"eager_tokens_per_s": tps_e, "compile_tokens_per_s": tps_c,
                                         "ratio": tps_c / tps_e, "compile_s": comp, "max_loss_gap": gap,
                                         "runs": runs}
    for recipe, runs in pairs.items():
        for line in runs[0]["notes"]:
            print(f"  [{recipe}] {line}")
    from torchtune_longshort.provenance import provenance

    summary["provenance"] = provenance(device="cpu", stdlib=True)
    (work / "results.json").write_text(json.dumps(summary, indent=2))
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()
