"""Where an evaluation pass spends its time: one long log-likelihood request through the ``longshort`` model and
lm-eval's ``hf`` model, each in a fresh process, timed with its system time and minor page faults (``getrusage``)
and, optionally, torch.profiler's operator table.

    PYTHONPATH=. python benchmarks/eval_phases.py --checkpoint_dir DIR [--length 8192] [--threads 2]
        [--dtype float32] [--repeats 2] [--profile] [--keep_freed both|on|off]

``--keep_freed`` runs each model with glibc keeping large freed blocks (``on``: what ``longshort`` does on a CPU by
default, ``cpu_keep_freed_blocks``), without (``off``), or both. For ``longshort`` ``off`` passes
``cpu_keep_freed_blocks=false``; for ``hf`` ``on`` sets it in that process before the model loads (lm-eval's ``hf``
never does). One warm-up pass, then ``--repeats`` measured passes; prints a table (and with ``--profile`` each
process's top operators by self CPU time).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time


def _worker(model: str, keep: bool, a: dict, q) -> None:
    import torch

    torch.set_num_threads(a["threads"])
    if keep and model == "hf":  # lm-eval's hf never does; set in this process before the model loads
        from torchtune_longshort.training.cpu_allocator import reuse_large_cpu_blocks

        reuse_large_cpu_blocks()
    from eval_throughput import _texts, make_lm
    from lm_eval.api.instance import Instance

    cfg = dict(ckpt=a["ckpt"], tok=a["ckpt"], batch_size=1, device="cpu", dtype=a["dtype"], max_length=a["length"])
    lm = make_lm(model, cfg, cpu_keep_freed_blocks=keep) if model == "ours" else make_lm(model, cfg)
    reqs = [Instance("loglikelihood", {}, ("", t), 0) for t in _texts(a["ckpt"], a["length"], 1)]
    lm.loglikelihood(reqs, disable_tqdm=True)  # warm-up
    passes = []
    for _ in range(a["repeats"]):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        lm.loglikelihood(reqs, disable_tqdm=True)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        passes.append({"wall": time.perf_counter() - t0, "sys": r1.ru_stime - r0.ru_stime,
                       "faults": r1.ru_minflt - r0.ru_minflt})
    table = ""
    if a["profile"]:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as p:
            lm.loglikelihood(reqs, disable_tqdm=True)
        table = p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=48)
    q.put({"passes": passes, "table": table})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint_dir", required=True)
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="also print torch.profiler's top operators")
    ap.add_argument("--keep_freed", choices=("both", "on", "off"), default="both")
    args = ap.parse_args()
    a = dict(ckpt=args.checkpoint_dir, length=args.length, threads=args.threads, dtype=args.dtype,
             repeats=args.repeats, profile=args.profile)
    settings = {"both": (False, True), "on": (True,), "off": (False,)}[args.keep_freed]
    ctx = mp.get_context("spawn")
    rows = []
    for keep in settings:
        for model in ("ours", "hf"):
            q = ctx.Queue()
            p = ctx.Process(target=_worker, args=(model, keep, a, q))
            p.start()
            res = q.get()
            p.join()
            for i, x in enumerate(res["passes"]):
                rows.append((model, keep, i + 1, x))
            if res["table"]:
                print(f"\n{model}, keep freed blocks {'on' if keep else 'off'}:\n{res['table']}", file=sys.stderr)
    print(f"\n{args.length} tokens, {args.dtype}, {args.threads} threads")
    print(f"{'model':6s} {'keep freed':>10s} {'pass':>4s} {'wall s':>7s} {'sys s':>6s} {'minor faults':>13s}")
    for model, keep, i, x in rows:
        print(f"{model:6s} {'on' if keep else 'off':>10s} {i:4d} {x['wall']:7.2f} {x['sys']:6.2f} {x['faults']:13d}")


if __name__ == "__main__":
    main()
