"""Throughput and peak memory of recipes/longshort_finetune.py against torchtune's own
``full_finetune_single_device`` on the same tiny model, data and tokens per step, in one command.

    PYTHONPATH=. python benchmarks/recipe_throughput.py [--steps 30] [--seq-len 256] [--batch 4] [--dim 128]
        [--recipe-overrides loss.num_chunks=8 loss.recompute_logits=True]

Our loss runs unchunked by default here, as the tiny configs do: at a 512-token vocabulary the logits are tiny and
chunking + recomputation only add time; pass ``--recipe-overrides`` to measure the chunked path.

Both recipes are started with ``tune run`` from the repo root (which also checks that torchtune's built-in recipes
still run beside our ``recipes/`` folder). Tokens per step are matched: our recipe feeds 2 windows x batch x L
tokens through the model, so torchtune's recipe gets 2 x batch packed sequences of L tokens. tokens/s is the mean
over the steps after the first ``--warmup`` (both recipes' own per-step logs); peak memory is the process's
peak RSS on CPU (``max_memory_allocated`` on GPU). Prints a table and writes ``results.json`` under --out.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TUNE = str(Path(sys.executable).with_name("tune"))


def prepare(work: Path, dim: int, seq_len: int):
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents
    from torchtune_longshort.data.tokenizer_training import train_sentencepiece
    from torchtune_longshort.models.hf_checkpoint import write_random_llama2_checkpoint

    tok = work / "tok"
    train_sentencepiece(iter_stdlib_documents(limit=80, include_tests=False), tok, vocab_size=512)
    ckpt = write_random_llama2_checkpoint(work / "ckpt", vocab_size=512, embed_dim=dim, num_layers=4, num_heads=4,
                                          num_kv_heads=2, intermediate_dim=int(dim * 8 / 3) // 8 * 8,
                                          max_seq_len=max(512, seq_len), seed=0)
    data = work / "stdlib.jsonl"
    with open(data, "w") as f:
        for t in iter_stdlib_documents(include_tests=False):
            f.write(json.dumps({"text": t}) + "\n")
    return tok, ckpt, data


def torchtune_config(work, tok, ckpt, data, dim, seq_len, batch, steps) -> Path:
    cfg = f"""
output_dir: {work}/tt_out
tokenizer:
  _component_: torchtune.models.llama2.llama2_tokenizer
  path: {tok}/tokenizer.model
  max_seq_len: {seq_len}
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
  vocab_size: 512
  num_layers: 4
  num_heads: 4
  num_kv_heads: 2
  embed_dim: {dim}
  intermediate_dim: {int(dim * 8 / 3) // 8 * 8}
  max_seq_len: {max(512, seq_len)}
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: {ckpt}
  checkpoint_files: [model.safetensors]
  model_type: LLAMA2
  output_dir: {work}/tt_out
resume_from_checkpoint: False
batch_size: {2 * batch}
epochs: 1
max_steps_per_epoch: {steps}
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
device: cpu
dtype: fp32
enable_activation_checkpointing: False
enable_activation_offloading: False
metric_logger:
  _component_: torchtune.training.metric_logging.DiskLogger
  log_dir: {work}/tt_logs
log_every_n_steps: 1
log_peak_memory_stats: False
"""
    p = work / "torchtune.yaml"
    p.write_text(cfg)
    return p


def run(cmd, env):
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{p.stderr[-4000:]}")
    return time.perf_counter() - t


def rss_of(cmd, env):
    """Run under /usr/bin/time-like accounting: peak RSS of the child via resource (GiB)."""
    import resource

    run(cmd, env)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe-overrides", nargs="*", default=["loss.num_chunks=1", "loss.recompute_logits=False"],
                    help="extra key=value overrides for our recipe (e.g. loss.recompute_logits=False loss.num_chunks=1)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="recipe_tp_"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HOME=str(work / "hf_home"))
    tok, ckpt, data = prepare(work, args.dim, args.seq_len)

    results = {}
    # torchtune's own recipe (its log: tokens_per_second_per_gpu per step)
    cfg = torchtune_config(work, tok, ckpt, data, args.dim, args.seq_len, args.batch, args.steps)
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    run([TUNE, "run", "full_finetune_single_device", "--config", str(cfg)], env)
    log = next((work / "tt_logs").glob("log_*.txt")).read_text()
    tps = [float(x) for x in re.findall(r"tokens_per_second_per_gpu:([0-9.eE+-]+)", log)][args.warmup:]
    results["torchtune full_finetune_single_device"] = {"tokens_per_s": sum(tps) / len(tps), "steps": len(tps)}

    for alpha in (0.0, 0.1):
        out = work / f"ours_a{alpha}"
        cmd = [TUNE, "run", "recipes/longshort_finetune.py", "--config", "configs/tiny/longshort_from_checkpoint.yaml",
               f"checkpoint_dir={ckpt}", f"tokenizer.path={tok}/tokenizer.model", f"output_dir={out}",
               "dataset._component_=torchtune_longshort.data.corpus.local_text", f"dataset.path={data}",
               "~dataset.include_tests", "~dataset.limit", f"loss.alpha={alpha}", f"seq_len={args.seq_len}",
               f"batch_size={args.batch}", f"max_steps={args.steps}", f"save_every_n_steps={10**6}",
               "validation.every_n_steps=1000000", "lr_scheduler.num_warmup_steps=0", "optimizer.lr=1e-3", *args.recipe_overrides,
               f"model.embed_dim={args.dim}", f"model.intermediate_dim={int(args.dim * 8 / 3) // 8 * 8}",
               "model.num_layers=4", f"model.max_seq_len={max(512, args.seq_len)}"]
        run(cmd, env)
        rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
        tps = [r["tokens_per_second"] for r in rows if "tokens_per_second" in r][args.warmup:]
        results[f"longshort alpha={alpha}"] = {
            "tokens_per_s": sum(tps) / len(tps), "steps": len(tps),
            "peak_rss_gib": max(r["peak_memory_gib"] for r in rows if "peak_memory_gib" in r),
        }
    base = results["torchtune full_finetune_single_device"]["tokens_per_s"]
    a0 = results["longshort alpha=0.0"]["tokens_per_s"]
    a1 = results["longshort alpha=0.1"]["tokens_per_s"]
    summary = {
        "config": vars(args), "results": results,
        "ratio_alpha0_vs_torchtune": a0 / base, "ratio_alpha0.1_vs_alpha0": a1 / a0,
    }
    print(f"tiny llama2: dim {args.dim}, 4 layers, vocab 512, L={args.seq_len}, {2 * args.batch * args.seq_len} "
          f"model tokens/step, {args.steps} steps ({args.warmup} warm-up dropped), {os.cpu_count()} CPUs")
    print(f"{'run':42s} {'tokens/s':>10s} {'peak RSS GiB':>13s}")
    for k, v in results.items():
        print(f"{k:42s} {v['tokens_per_s']:10.0f} {v.get('peak_rss_gib', float('nan')):13.2f}")
    print(f"ratio ours(alpha=0) / torchtune = {a0 / base:.3f}   (target >= 0.95)")
    print(f"ratio alpha=0.1 / alpha=0      = {a1 / a0:.3f}")
    from torchtune_longshort.provenance import provenance

    summary["provenance"] = provenance(device="cpu", stdlib=True)  # both recipes train on stdlib text
    (work / "results.json").write_text(json.dumps(summary, indent=2))
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()
