"""Peak tensor memory of the ``longshort`` model's scoring forward per row and token, against the estimate
``batch_size=auto`` bounds CPU batches with (:class:`torchtune_longshort.eval.model.batch_size.RowMemory`).

    PYTHONPATH=. python benchmarks/eval_row_memory.py \
        --checkpoint_dir ~/.cache/torchtune_longshort/smollm2-135m-instruct

For each (length, rows) one warm-up pass, then one pass under :class:`tensor_memory.PeakTensorMemory` (torch's own
allocator events, not RSS) of ``score_continuations`` on ``rows`` perplexity-shaped requests (every input token
scored). Prints peak MiB, bytes per token per row, and the estimate's ``fixed + rows x row_bytes`` beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import length_by_rows  # noqa: E402
from tensor_memory import PeakTensorMemory  # noqa: E402

from torchtune_longshort.eval.model.adapter import LongShortLM  # noqa: E402
from torchtune_longshort.eval.model.batch_size import RowMemory  # noqa: E402
from torchtune_longshort.eval.model.scoring import score_continuations  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint_dir", required=True)
    p.add_argument("--points", type=length_by_rows, default="256x8,256x32,1024x4,1024x16", help="LENGTHxROWS,...")
    a = p.parse_args(argv)
    if not Path(a.checkpoint_dir).is_dir():
        p.error(f"--checkpoint_dir {a.checkpoint_dir}: no such folder; pass a converted checkpoint folder")
    torch.set_num_threads(1)
    lm = LongShortLM(pretrained=a.checkpoint_dir, device="cpu", batch_size=1)
    estimate = RowMemory.of(lm.model, lm.vocab_size)
    kw = dict(pad_id=lm.tokenizer.pad_id, vocab_size=lm.vocab_size, device=torch.device("cpu"), disable_tqdm=True)
    print("| tokens | rows | peak MiB | bytes / token / row | estimate MiB | estimate / peak |")
    print("|---|---|---|---|---|---|")
    for length, rows in a.points:
        prepared = [(i, list(range(100 + i, 100 + i + length)), list(range(200, 200 + length))) for i in range(rows)]
        score_continuations(lm.model, prepared, batch_size=rows, **kw)
        with PeakTensorMemory() as mem:
            score_continuations(lm.model, prepared, batch_size=rows, **kw)
        est = estimate.fixed + rows * estimate.row_bytes(length)
        print(f"| {length} | {rows} | {mem.peak_mib:.1f} | {mem.peak_bytes / rows / length:,.0f} | {est / 2**20:.1f} "
              f"| {est / mem.peak_bytes:.2f} |", flush=True)


if __name__ == "__main__":
    main()
