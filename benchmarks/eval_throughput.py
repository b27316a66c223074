"""Throughput and peak tensor memory of the ``longshort`` lm-eval model vs lm-eval's own ``hf`` model, same checkpoint.

    python benchmarks/eval_throughput.py [--checkpoint_dir DIR --tokenizer DIR] [--lengths 1024,4096,8192]
        [--vocab 32000] [--device cpu|cuda] [--dtype float32|bfloat16] [--out benchmarks/results/eval_throughput.json]

Workloads (the requests lm-eval sends for our tasks): ``ppl@L`` = ``--num_seqs`` loglikelihood requests with an
empty context and an ``L``-token continuation (the ``long_ppl`` request), and ``gen`` = ``--gen_prompts``
generate_until requests of ``--gen_prompt_len`` tokens, ``--gen_tokens`` new tokens each (greedy, no stop string;
``--gen_prompts 0`` skips it). Each (model, workload) runs in a fresh process: one warm-up pass, one timed pass
(tokens/s), then one pass for memory. Peak memory is peak *tensor* memory above what the loaded model already
holds: CUDA ``max_memory_allocated``, else the peak of live allocations replayed from torch.profiler's allocator
events (``benchmarks/tensor_memory.py``; not process RSS, which counts imports). Without ``--checkpoint_dir`` a
random Llama-2-shaped checkpoint (dim 256, 4 layers, ``--vocab`` outputs, positions for the longest length) and a
stdlib-trained 512-piece tokenizer are made in a temp folder. Prints a table with ratios ours / hf (tokens/s: > 1
means ours is faster; memory: < 1 means ours uses less) and the largest relative difference between the two models'
log-likelihoods, and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _texts(tokenizer_dir: str, length: int, n: int):
    from torchtune_longshort.eval.tasks.common.long_text import iter_texts
    from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer, fixed_length_samples

    tok = TaskTokenizer(tokenizer_dir)
    return [s.text for s in fixed_length_samples(iter_texts("stdlib", min_chars=length // 2), tok, length, n)]


def make_lm(model: str, cfg: dict, **ours_args):
    """lm-eval model ``ours`` (``longshort``, with ``ours_args`` as further model args) or ``hf`` on
    ``cfg["ckpt"]``."""
    if model == "ours":
        from torchtune_longshort.eval.model.adapter import LongShortLM

        return LongShortLM(checkpoint_dir=cfg["ckpt"], tokenizer=cfg["tok"], batch_size=cfg["batch_size"],
                           device=cfg["device"], dtype=cfg["dtype"], max_length=cfg["max_length"], **ours_args)
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=cfg["ckpt"], tokenizer=cfg["tok"], batch_size=cfg["batch_size"], device=cfg["device"],
                dtype=cfg["dtype"], max_length=cfg["max_length"])


def measure(lm, workload: str, cfg: dict) -> dict:
    """Warm-up, timed and memory passes of one workload on a loaded lm-eval model (see module doc)."""
    import torch
    from lm_eval.api.instance import Instance

    if workload.startswith("ppl@"):
        L = int(workload[4:])
        texts = _texts(cfg["tok"], L, cfg["num_seqs"])
        reqs = [Instance("loglikelihood", {}, ("", t), i) for i, t in enumerate(texts)]
        run = lambda: lm.loglikelihood(reqs, disable_tqdm=True)  # noqa: E731
        tokens = L * len(texts)
    else:
        texts = _texts(cfg["tok"], cfg["gen_prompt_len"], cfg["gen_prompts"])
        kw = {"until": [], "max_gen_toks": cfg["gen_tokens"], "do_sample": False}
        reqs = [Instance("generate_until", {}, (t, dict(kw)), i) for i, t in enumerate(texts)]
        run = lambda: lm.generate_until(reqs, disable_tqdm=True)  # noqa: E731
        tokens = cfg["gen_tokens"] * len(texts)
    cuda = cfg["device"].startswith("cuda")
    run()  # warm-up (allocator, kernels)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = run()
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    total = None
    if not cfg.get("memory", True):
        peak = float("nan")
    elif cuda:
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        run()
        torch.cuda.synchronize()
        total = torch.cuda.max_memory_allocated() / 2**20  # weights included
        peak = total - base / 2**20
    else:
        from tensor_memory import PeakTensorMemory

        with PeakTensorMemory() as mem:
            run()
        peak = mem.peak_mib
    results = [r[0] if isinstance(r, tuple) else r for r in out]
    return {"workload": workload, "seconds": dt, "tokens": tokens, "tokens_per_s": tokens / dt,
            "peak_mib": peak, "peak_total_mib": total,
            "memory": "cuda_max_allocated" if cuda else "torch_profiler_allocations", "results": results}


def _worker(model: str, workload: str, cfg: dict, q) -> None:
    try:
        import torch

        torch.set_num_threads(cfg["threads"])
        q.put({"model": model, **measure(make_lm(model, cfg), workload, cfg)})
    except BaseException as err:  # the parent waits on the queue: tell it, or it waits for ever
        line = (str(err).strip().splitlines() or [""])[0]
        q.put({"model": model, "error": f"{type(err).__name__}: {line}"})
        raise


def _receive(q, p) -> dict:
    """The worker's result, or ``{"error": ...}`` when it died without one (killed, out of memory): a bare
    ``q.get()`` waited for ever on a child that had already failed."""
    while True:
        try:
            return q.get(timeout=2)
        except queue.Empty:
            if not p.is_alive():
                try:
                    return q.get(timeout=2)
                except queue.Empty:
                    return {"error": f"the process exited with code {p.exitcode} and no result"}


def _refusal(args):
    """One line naming the first option no run could use (``None`` when all are sound), before any work."""
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        return f"--lengths {args.lengths!r}: comma-separated token counts, such as 1024,4096"
    if min(lengths) < 1:
        return f"--lengths {args.lengths}: each at least 1 token"
    for flag in ("num_seqs", "batch_size", "rounds", "threads", "vocab", "gen_prompt_len", "gen_tokens"):
        if getattr(args, flag) < 1:
            return f"--{flag} {getattr(args, flag)}: at least 1"
    if args.gen_prompts < 0:
        return f"--gen_prompts {args.gen_prompts}: 0 (no generation workload) or more"
    if args.memory_rounds is not None and not 1 <= args.memory_rounds:
        return f"--memory_rounds {args.memory_rounds}: at least 1 round measures memory"
    for flag in ("checkpoint_dir", "tokenizer"):
        if getattr(args, flag) and not Path(getattr(args, flag)).is_dir():
            return f"--{flag} {getattr(args, flag)}: no such folder; pass a Hugging Face checkpoint folder"
    if args.out.is_dir():
        return f"--out {args.out}: a folder; pass the JSON file to write, such as {args.out / 'eval_throughput.json'}"
    import torch

    try:
        device = torch.device(args.device)
    except RuntimeError:
        return f"--device {args.device!r}: not a torch device; use cpu or cuda[:N]"
    if device.type == "cuda" and not torch.cuda.is_available():
        return f"--device {args.device}: no CUDA device here; use --device cpu"
    if device.type not in ("cpu", "cuda"):
        return f"--device {args.device}: cpu or cuda[:N]"
    return None


def _make_checkpoint(tmp: Path, vocab: int, positions: int):
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents
    from torchtune_longshort.data.tokenizer_training import train_sentencepiece
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    train_sentencepiece(iter_stdlib_documents(limit=80, include_tests=False), tmp / "tok", vocab_size=512)
    ckpt = write_random_llama2_checkpoint(tmp / "ckpt", vocab_size=vocab, embed_dim=256, num_layers=4, num_heads=8,
                                          num_kv_heads=4, intermediate_dim=688, max_seq_len=positions)
    return str(ckpt), str(tmp / "tok")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint_dir")
    ap.add_argument("--tokenizer")
    ap.add_argument("--lengths", default="1024,4096,8192")
    ap.add_argument("--vocab", type=int, default=32000, help="output vocabulary of the generated checkpoint")
    ap.add_argument("--num_seqs", type=int, default=2)
    ap.add_argument("--batch_size", type=int, default=1)
    ap.add_argument("--gen_prompts", type=int, default=4)
    ap.add_argument("--gen_prompt_len", type=int, default=256)
    ap.add_argument("--gen_tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1, help="interleaved repeats of every run (median tokens/s); the "
                    "order of the two models alternates from round to round")
    ap.add_argument("--memory_rounds", type=int, default=None,
                    help="measure peak memory in the first N rounds only (default: every round); the memory pass "
                    "replays allocator events and is the slowest of the three on a CPU")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "eval_throughput.json",
                    help="the JSON written (default: benchmarks/results/eval_throughput.json beside this script)")
    args = ap.parse_args(argv)
    refusal = _refusal(args)
    if refusal:
        ap.error(refusal)
    lengths = [int(x) for x in args.lengths.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="eval_tp_"))
    try:
        _run(args, lengths, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the generated checkpoint and tokenizer, ours alone


def _run(args, lengths, tmp: Path) -> None:
    positions = max(lengths + [args.gen_prompt_len + args.gen_tokens])
    ckpt, tok = ((args.checkpoint_dir, args.tokenizer or args.checkpoint_dir) if args.checkpoint_dir
                 else _make_checkpoint(tmp, args.vocab, max(4096, positions)))
    cfg = dict(ckpt=ckpt, tok=tok, batch_size=args.batch_size, device=args.device, dtype=args.dtype,
               max_length=max(lengths + [args.gen_prompt_len + args.gen_tokens]), num_seqs=args.num_seqs,
               gen_prompts=args.gen_prompts, gen_prompt_len=args.gen_prompt_len, gen_tokens=args.gen_tokens,
               threads=args.threads)
    ctx = mp.get_context("spawn")
    runs = {}
    for r in range(args.rounds):
        for workload in [f"ppl@{L}" for L in lengths] + (["gen"] if args.gen_prompts > 0 else []):
            # interleaved, the order alternating: hf, ours | ours, hf | ... (a drift in the machine's speed does not
            # favour whichever model always runs second)
            for model in ("hf", "ours") if r % 2 == 0 else ("ours", "hf"):
                q = ctx.Queue()
                run_cfg = {**cfg, "memory": args.memory_rounds is None or r < args.memory_rounds}
                p = ctx.Process(target=_worker, args=(model, workload, run_cfg, q))
                p.start()
                res = _receive(q, p)
                p.join()
                if "error" in res:  # a ratio needs both models: stop, in one line, with what failed
                    sys.exit(f"eval_throughput: {model} on {workload} (round {r + 1}) failed: {res['error']}")
                runs.setdefault((model, workload), []).append(res)
                print(f"  round {r + 1} {model:4s} {workload:9s} {res['tokens_per_s']:10.1f} tok/s  "
                      f"peak {res['peak_mib']:8.1f} MiB", file=sys.stderr)
    rows = []
    for (model, workload), rs in runs.items():
        tps = sorted(x["tokens_per_s"] for x in rs)
        med = tps[len(tps) // 2] if len(tps) % 2 else (tps[len(tps) // 2 - 1] + tps[len(tps) // 2]) / 2
        peaks = [x["peak_mib"] for x in rs if x["peak_mib"] == x["peak_mib"]]  # NaN: a round without a memory pass
        rows.append({**rs[0], "tokens_per_s": med, "runs_tokens_per_s": [x["tokens_per_s"] for x in rs],
                     "peak_mib": max(peaks)})
    table = []
    print(f"\n{'workload':10s} {'hf tok/s':>10s} {'ours tok/s':>11s} {'speed x':>8s} {'hf MiB':>9s} {'ours MiB':>9s} "
          f"{'mem x':>6s} {'max rel d':>10s}")
    for workload in dict.fromkeys(r["workload"] for r in rows):
        hf = next(r for r in rows if r["workload"] == workload and r["model"] == "hf")
        ours = next(r for r in rows if r["workload"] == workload and r["model"] == "ours")
        if workload == "gen":  # 1 if any generation differs
            diff = float(hf["results"] != ours["results"])
        else:  # largest relative difference of the log-likelihoods
            diff = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(hf["results"], ours["results"]))
        entry = {"workload": workload, "hf": hf, "ours": ours, "speed_ratio": ours["tokens_per_s"] / hf["tokens_per_s"],
                 "memory_ratio": ours["peak_mib"] / hf["peak_mib"], "result_diff": diff}
        table.append(entry)
        print(f"{workload:10s} {hf['tokens_per_s']:10.1f} {ours['tokens_per_s']:11.1f} {entry['speed_ratio']:8.2f} "
              f"{hf['peak_mib']:9.1f} {ours['peak_mib']:9.1f} {entry['memory_ratio']:6.2f} {diff:10.2e}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from torchtune_longshort.provenance import provenance

    args.out.write_text(json.dumps({"config": {k: v for k, v in cfg.items()}, "rows": table,
                                    "provenance": provenance(device=cfg["device"])}, indent=2, default=str))
    print(f"\nwrote {args.out} (speed x, mem x: ours / hf; memory = {rows[0]['memory']}, above the loaded model; "
          f"{args.threads} threads; gen 'max rel d' = 1 if any generation differs)")


if __name__ == "__main__":
    main()
