"""Throughput and peak memory of torchtune_longshort/recipes/longshort_finetune.py against torchtune's own
``full_finetune_single_device`` (with its ``CEWithChunkedOutputLoss``) on the same model, data and tokens per step,
in one command.

    PYTHONPATH=. python benchmarks/recipe_throughput.py [--vocab 512 32000] [--rounds 2] [--steps 20]
        [--seq-len 256] [--batch 2] [--dim 256] [--threads 1] [--recipe-overrides loss.fused=False]

Our recipe runs configs/tiny/longshort_from_checkpoint.yaml's loss: chunked and fused (the default on the hidden-state
path); ``--recipe-overrides loss.fused=False`` measures the checkpointed fallback instead. The model is a random
Llama-2 (4 layers, ``--dim``) with a ``--vocab`` output layer; the tokenizer is a 512-piece SentencePiece model for
every vocabulary (ids above 511 never occur as inputs or targets, but the output layer and softmax cost what a real
``--vocab`` costs).

Both recipes are started with ``tune run`` from the repo root (which also checks that torchtune's built-in recipes
still run beside our ``recipes/`` folder). Tokens per step are matched: our recipe feeds 2 windows x batch x L
tokens through the model, so torchtune's recipe gets 2 x batch packed sequences of L tokens. tokens/s of a run is the
mean over its steps after the first ``--warmup`` (both recipes' own per-step logs); each round runs torchtune,
ours at alpha 0 and ours at alpha 0.1 once, one after the other, and the table gives the median over ``--rounds``
(interleaved, so that load on the machine hits all three alike). Peak memory is each recipe process's own peak RSS
(``wait4``; it includes the imports, which are the same torchtune stack for both). Prints a table and writes
``results.json`` under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
TUNE = str(Path(sys.executable).with_name("tune"))


@dataclass
class Shape:
    """One comparison setting: a Llama-2-shaped model and what a step feeds it (shared by both recipes)."""

    vocab: int
    dim: int = 256
    layers: int = 4
    heads: int = 4
    kv: int = 2
    hidden: Optional[int] = None  # MLP width; default 8/3 dim rounded down to a multiple of 8
    seq_len: int = 256
    batch: int = 2  # our dual-window samples per step; torchtune gets 2 x batch sequences
    steps: int = 20
    device: str = "cpu"
    dtype: str = "fp32"
    activation_checkpointing: bool = False

    @property
    def mlp(self) -> int:
        return self.hidden or int(self.dim * 8 / 3) // 8 * 8

    @property
    def tokens_per_step(self) -> int:
        return 2 * self.batch * self.seq_len


def prepare_tokenizer(work: Path) -> Path:
    """A 512-piece SentencePiece tokenizer trained on stdlib text (once per ``work`` folder)."""
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents
    from torchtune_longshort.data.tokenizer_training import train_sentencepiece

    tok = work / "tok"
    if not (tok / "tokenizer.model").is_file():
        train_sentencepiece(iter_stdlib_documents(limit=80, include_tests=False), tok, vocab_size=512)
    return tok


def prepare(work: Path, shape: Shape):
    """Tokenizer (512 pieces, trained once per ``work``), a random checkpoint of ``shape`` and the stdlib JSONL."""
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    tok = prepare_tokenizer(work)
    ckpt = work / f"ckpt_v{shape.vocab}_d{shape.dim}_l{shape.layers}"
    if not (ckpt / "config.json").is_file():
        write_random_llama2_checkpoint(ckpt, vocab_size=shape.vocab, embed_dim=shape.dim, num_layers=shape.layers,
                                       num_heads=shape.heads, num_kv_heads=shape.kv, intermediate_dim=shape.mlp,
                                       max_seq_len=max(512, shape.seq_len), seed=0)
    data = work / "stdlib.jsonl"
    if not data.is_file():
        with open(data, "w") as f:
            for t in iter_stdlib_documents(include_tests=False):
                f.write(json.dumps({"text": t}) + "\n")
    return tok, ckpt, data


def torchtune_config(work, tok, ckpt, data, shape: Shape, tag) -> Path:
    """YAML for torchtune's ``full_finetune_single_device`` with ``CEWithChunkedOutputLoss``, same tokens/step."""
    cfg = f"""
output_dir: {work}/tt_out_{tag}
tokenizer:
  _component_: torchtune.models.llama2.llama2_tokenizer
  path: {tok}/tokenizer.model
  max_seq_len: {shape.seq_len}
dataset:
  _component_: torchtune.datasets.text_completion_dataset
  source: json
  data_files: {data}
  column: text
  split: train
  packed: True
seed: 0
shuffle: False
model:
  _component_: torchtune.models.llama2.llama2
  vocab_size: {shape.vocab}
  num_layers: {shape.layers}
  num_heads: {shape.heads}
  num_kv_heads: {shape.kv}
  embed_dim: {shape.dim}
  intermediate_dim: {shape.mlp}
  max_seq_len: {max(512, shape.seq_len)}
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: {ckpt}
  checkpoint_files: [model.safetensors]
  model_type: LLAMA2
  output_dir: {work}/tt_out_{tag}
resume_from_checkpoint: False
batch_size: {2 * shape.batch}
epochs: 1
max_steps_per_epoch: {shape.steps}
gradient_accumulation_steps: 1
optimizer:
  _component_: torch.optim.AdamW
  lr: 1.0e-3
  fused: False
optimizer_in_bwd: False
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
clip_grad_norm: 1.0
compile: False
device: {shape.device}
dtype: {shape.dtype}
enable_activation_checkpointing: {shape.activation_checkpointing}
enable_activation_offloading: False
metric_logger:
  _component_: torchtune.training.metric_logging.DiskLogger
  log_dir: {work}/tt_logs_{tag}
log_every_n_steps: 1
log_peak_memory_stats: False
"""
    p = work / f"torchtune_{tag}.yaml"
    p.write_text(cfg)
    return p


OUR_CONFIG = "configs/tiny/longshort_from_checkpoint.yaml"


def ours_overrides(work, tok, ckpt, data, shape: Shape, alpha: float, tag, extra=()) -> list:
    """``key=value`` overrides of :data:`OUR_CONFIG` for the same model, data and tokens per step."""
    return [
        f"checkpoint_dir={ckpt}", f"tokenizer.path={tok}/tokenizer.model", f"output_dir={work / tag}",
        "dataset._component_=torchtune_longshort.data.corpus.local_text", f"dataset.path={data}",
        "~dataset.include_tests", "~dataset.limit", f"loss.alpha={alpha}", f"seq_len={shape.seq_len}",
        f"batch_size={shape.batch}", f"max_steps={shape.steps}", f"save_every_n_steps={10**6}",
        "validation.every_n_steps=1000000", "lr_scheduler.num_warmup_steps=0", "optimizer.lr=1e-3",
        f"model.vocab_size={shape.vocab}", f"model.embed_dim={shape.dim}", f"model.intermediate_dim={shape.mlp}",
        f"model.num_layers={shape.layers}", f"model.num_heads={shape.heads}", f"model.num_kv_heads={shape.kv}",
        f"model.max_seq_len={max(512, shape.seq_len)}", f"device={shape.device}", f"dtype={shape.dtype}",
        f"enable_activation_checkpointing={shape.activation_checkpointing}", *extra,
    ]


def torchtune_tokens_per_s(work: Path, tag: str, warmup: int) -> float:
    log = next((work / f"tt_logs_{tag}").glob("log_*.txt")).read_text()
    tps = [float(x) for x in re.findall(r"tokens_per_second_per_gpu:([0-9.eE+-]+)", log)][warmup:]
    return sum(tps) / len(tps)


def ours_tokens_per_s(work: Path, tag: str, warmup: int) -> float:
    rows = [json.loads(l) for l in (work / tag / "metrics.jsonl").read_text().splitlines()]
    tps = [r["tokens_per_second"] for r in rows if "tokens_per_second" in r][warmup:]
    return sum(tps) / len(tps)


def run(cmd, env, log_path: Path) -> float:
    """Run ``cmd`` to the end; its peak RSS in GiB (``wait4`` on this child only)."""
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{log_path.read_text()[-4000:]}")
    return usage.ru_maxrss / 2**20  # Linux: KiB


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def run_torchtune(work, tok, ckpt, data, shape, warmup, tag, env):
    cfg = torchtune_config(work, tok, ckpt, data, shape, tag)
    rss = run([TUNE, "run", "full_finetune_single_device", "--config", str(cfg)], env, work / f"{tag}.log")
    return torchtune_tokens_per_s(work, tag, warmup), rss


def run_ours(work, tok, ckpt, data, shape, warmup, alpha, tag, env, extra=()):
    cmd = [TUNE, "run", "torchtune_longshort/recipes/longshort_finetune.py", "--config", OUR_CONFIG,
           *ours_overrides(work, tok, ckpt, data, shape, alpha, tag, extra)]
    rss = run(cmd, env, work / f"{tag}.log")
    path = re.search(r"Loss path: (\S+)", (work / f"{tag}.log").read_text())
    return ours_tokens_per_s(work, tag, warmup), rss, path.group(1) if path else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, nargs="+", default=[512, 32000])
    ap.add_argument("--recipe-overrides", nargs="*", default=[],
                    help="extra key=value overrides for our recipe (e.g. loss.fused=False loss.num_chunks=8)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved repeats of the three runs (median reported)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2, help="our dual-window samples per step (torchtune gets 2x this)")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP_NUM_THREADS for both recipes (default: torch's); 1 is steadier on a shared CPU")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="recipe_tp_"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HOME=str(work / "hf_home"))
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    names = ["torchtune full_finetune_single_device", "longshort alpha=0.0", "longshort alpha=0.1"]
    summary = {"config": vars(args), "per_vocab": {}}
    t_start = time.perf_counter()
    for vocab in args.vocab:
        shape = Shape(vocab=vocab, dim=args.dim, seq_len=args.seq_len, batch=args.batch, steps=args.steps)
        tok, ckpt, data = prepare(work, shape)
        runs = {k: [] for k in names}
        path = "?"
        for r in range(args.rounds):
            runs[names[0]].append(run_torchtune(work, tok, ckpt, data, shape, args.warmup, f"tt_v{vocab}_r{r}", env))
            for alpha, name in ((0.0, names[1]), (0.1, names[2])):
                tps, rss, path = run_ours(work, tok, ckpt, data, shape, args.warmup, alpha, f"ours_v{vocab}_a{alpha}_r{r}",
                                          env, args.recipe_overrides)
                runs[name].append((tps, rss))
            print(f"  vocab {vocab} round {r + 1}/{args.rounds} done ({time.perf_counter() - t_start:.0f} s)",
                  file=sys.stderr)
        res = {k: {"tokens_per_s": median([t for t, _ in v]), "peak_rss_gib": median([m for _, m in v]),
                   "runs_tokens_per_s": [t for t, _ in v]} for k, v in runs.items()}
        base, a0, a1 = (res[k]["tokens_per_s"] for k in names)
        summary["per_vocab"][vocab] = {
            "results": res, "loss_path": path, "ratio_alpha0_vs_torchtune": a0 / base, "ratio_alpha0.1_vs_alpha0": a1 / a0,
            "rss_alpha0_vs_torchtune": res[names[1]]["peak_rss_gib"] / res[names[0]]["peak_rss_gib"],
        }
    print(f"llama2: dim {args.dim}, 4 layers, L={args.seq_len}, {2 * args.batch * args.seq_len} model tokens/step, "
          f"{args.steps} steps ({args.warmup} warm-up dropped), median of {args.rounds} interleaved rounds, "
          f"{os.cpu_count()} CPUs, OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')}, fp32; our loss path: {path}")
    print("| vocab | run | tokens/s (median) | runs | peak RSS GiB |")
    print("|---|---|---|---|---|")
    for vocab, v in summary["per_vocab"].items():
        for k, r in v["results"].items():
            runs_s = ", ".join(f"{t:.0f}" for t in r["runs_tokens_per_s"])
            print(f"| {vocab} | {k} | {r['tokens_per_s']:.0f} | {runs_s} | {r['peak_rss_gib']:.3f} |")
    for vocab, v in summary["per_vocab"].items():
        print(f"vocab {vocab}: ours(alpha=0) / torchtune = {v['ratio_alpha0_vs_torchtune']:.3f} tokens/s, "
              f"{v['rss_alpha0_vs_torchtune']:.3f} peak RSS; alpha=0.1 / alpha=0 = {v['ratio_alpha0.1_vs_alpha0']:.3f}")
    from torchtune_longshort.provenance import provenance

    summary["provenance"] = provenance(device="cpu", stdlib=True)  # both recipes train on stdlib text
    (work / "results.json").write_text(json.dumps(summary, indent=2))
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()
