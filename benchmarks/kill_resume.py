"""Kill a tiny training run at random moments (SIGKILL: no handler runs), resume it each time, and check that the
finished run's losses equal an uninterrupted run's, bit for bit, and that no file outside the run's folder changed.

    python benchmarks/kill_resume.py --kills 10 --seed 0

Prints one line per kill (when it landed: setup / training / during a checkpoint write) and a summary table; writes
``kill_resume.json`` beside ``--out``. The first kill lands before the first save, where the run holds only its
step_0: the script then restarts with ``overwrite_output_dir=True``, as the recipe's message says.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import positive_int  # noqa: E402  (benchmarks/: not a package)

REPO = Path(__file__).resolve().parents[1]
TUNE = str(Path(sys.executable).with_name("tune"))
RECIPE = "torchtune_longshort/recipes/longshort_finetune.py"


def losses(out: Path):
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def _arguments(argv) -> argparse.Namespace:
    """The command line, an --out that is not a new or empty folder refused."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=positive_int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=positive_int, default=40)
    ap.add_argument("--out", default=None, help="working folder (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.out and Path(args.out).exists() and (not Path(args.out).is_dir() or any(Path(args.out).iterdir())):
        # its runs write folders of fixed names with overwrite_output_dir=True: only in a folder of its own
        ap.error(f"--out {args.out!r} exists and is not an empty folder; give a new or empty one (each run replaces "
                 "its output folder by name, with overwrite_output_dir=True)")
    return args


def main(argv=None) -> int:
    args = _arguments(argv)
    rng = random.Random(args.seed)
    work = Path(args.out or tempfile.mkdtemp(prefix="kill_resume_"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    base = [TUNE, "run", RECIPE, "--config", str(REPO / "configs/tiny/longshort_stdlib.yaml"),
            f"tokenizer.path={work / 'tokenizer'}", f"max_steps={args.steps}", "save_every_n_steps=4",
            "validation=null", "model.num_layers=2", "model.embed_dim=64", "model.intermediate_dim=172",
            "seq_len=64", "batch_size=4"]
    ref = work / "ref"
    # One step first, so the tokenizer is trained (once, shared) before anything is timed.
    subprocess.run(base + [f"output_dir={work / 'warmup'}", "overwrite_output_dir=True", "max_steps=1"], env=env,
                   check=True, capture_output=True)
    # The reference run, timed: when its first step is logged (start-up) and how long a step takes.
    t = time.time()
    p = subprocess.Popen(base + [f"output_dir={ref}", "overwrite_output_dir=True"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_first = None
    while p.poll() is None:
        if t_first is None and (ref / "metrics.jsonl").is_file() and losses(ref):
            t_first = time.time() - t
        time.sleep(0.05)
    if p.returncode != 0:
        raise SystemExit(f"reference run failed ({p.returncode})")
    step_s = (time.time() - t - (t_first or 0)) / max(1, args.steps - 1)
    sentinel = work / "sentinel.txt"  # a user's file beside the run: must survive every kill and resume
    sentinel.write_text("keep me\n")
    out = work / "run"
    rows, episodes = [], []
    fresh = True  # the next attempt starts the run over (overwrite) instead of resuming it
    for k in range(args.kills):
        done = [s for s, _ in losses(out)] if (not fresh and (out / "metrics.jsonl").exists()) else []
        extra = ["overwrite_output_dir=True"] if fresh else ["resume=True"]
        remaining = args.steps - (done[-1] if done else 0)
        delay = rng.uniform(0.5 * t_first, t_first + 0.9 * remaining * step_s)  # start-up .. near the end
        started = time.time()
        p = subprocess.Popen(base + [f"output_dir={out}", *extra], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        staging = [q for q in (out / ".staging").glob("step_*") if q.stat().st_mtime >= started] \
            if (out / ".staging").exists() else []
        saved = any((out / "recipe_state").glob("step_*.pt"))
        where = "during a checkpoint write" if staging else ("training" if saved else "before the first save")
        if p.returncode == 0:
            where = "after the run finished (no kill)"
        after = [s for s, _ in losses(out)] if (out / "metrics.jsonl").exists() else []
        rows.append({"kill": k + 1, "after_s": round(delay, 2), "mode": extra[0], "where": where,
                     "last_logged_step": after[-1] if after else 0, "exit": p.returncode})
        print(f"kill {k + 1}: {delay:5.2f} s in ({extra[0]}), {where}, last logged step {rows[-1]['last_logged_step']}")
        fresh = not saved  # nothing to resume from (killed before the first save): start over, as the recipe says
        if p.returncode == 0 or (after and after[-1] == args.steps and saved):
            # The attempt outran the kill: this episode is complete; check it and start a new one.
            episodes.append(losses(out) == losses(ref))
            fresh = True
    if not fresh:  # finish the episode in flight
        final = subprocess.run(base + [f"output_dir={out}", "resume=True"], env=env, capture_output=True, text=True)
        episodes.append(final.returncode == 0 and losses(out) == losses(ref))
    same = all(episodes) and bool(episodes)
    intact = sentinel.read_text() == "keep me\n"
    summary = {"kills": args.kills, "episodes": len(episodes), "episodes_equal_uninterrupted": sum(episodes),
               "user_file_intact": intact, "bytes_lost": 0 if intact else len("keep me\n"), "kills_detail": rows}
    (work / "kill_resume.json").write_text(json.dumps(summary, indent=2))
    landed = sum(not r["where"].startswith("after") for r in rows)
    print("\n| attempts | kills that landed | during a save | before the first save | runs finished | "
          "equal to uninterrupted | user files intact |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.kills} | {landed} | {sum(r['where'] == 'during a checkpoint write' for r in rows)} | "
          f"{sum(r['where'] == 'before the first save' for r in rows)} | {len(episodes)} | {sum(episodes)} | "
          f"{intact} |")
    return 0 if same and intact else 1


if __name__ == "__main__":
    sys.exit(main())
