"""Out of memory in an evaluation never sinks the run: a request that does not fit the device is scored NaN with the
reason, and the requests of its batch that fit are scored as without the limit (run again one at a time)
(``loglikelihood``, ``generate_until``, ``next_token_divergence``).

A real allocator failure: a fresh process (its heap holds no freed blocks a request could reuse) loads a random
checkpoint of dim 1024, caps its own address space at what it maps + 16 MiB, and asks each request type for a short
and a long request in one batch. The long one (3000 tokens: its q/k/v projections alone take 36 MiB) cannot
allocate; the short one (60 tokens) can. The reference: the same requests once the cap is lifted, in that process.
Before, the long request's error ended the run with a traceback; and a generation whose KV-cache set-up failed
part-way left caches behind that refused every later generation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from warm_start import with_warm_start

pytest.importorskip("lm_eval")

REPO = Path(__file__).resolve().parents[1]
SCRIPT = r"""
import json, resource, sys
from pathlib import Path
import torch
from lm_eval.api.instance import Instance
from torchtune_longshort.eval.model.adapter import LongShortLM
from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

ckpt = write_random_llama2_checkpoint(Path(sys.argv[1]), vocab_size=512, embed_dim=1024, num_layers=1, num_heads=8,
                                      num_kv_heads=2, intermediate_dim=4096, max_seq_len=4096, seed=0)
lm = LongShortLM(checkpoint_dir=str(ckpt), tokenizer=sys.argv[2], device="cpu", batch_size=2)
ids = lm.tokenizer.encode_plain(Path(torch.__file__).with_name("functional.py").read_text())
short, long = lm.tok_decode(ids[:60]), lm.tok_decode(ids[:3000])


def ask(kind, args):
    return [Instance(kind, {}, a, i, metadata=("oomtask", None, None)) for i, a in enumerate(args)]


def run():
    ll = lm.loglikelihood(ask("loglikelihood", [(short, " x = 1"), (long, " x = 1")]), True)
    gen = lm.generate_until(ask("generate_until", [(short, {"max_gen_toks": 4}), (long, {"max_gen_toks": 4})]), True)
    div = lm.next_token_divergence(ask("next_token_divergence", [(short, {"l1": 60, "l2": 30}),
                                                                 (long, {"l1": 2990, "l2": 1500})]), True)
    return {"loglikelihood": [[r[0], getattr(r, "refusal", "")] for r in ll],
            "generate_until": [[g, getattr(g, "refusal", "")] for g in gen],
            "next_token_divergence": [[d["sce"], getattr(d, "refusal", "")] for d in div]}


vm = next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmSize"))
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm + 16 * 2**20, hard))
capped = run()
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
print(json.dumps({"capped": capped, "free": run()}))
"""


def test_a_request_that_does_not_fit_is_nan_and_its_batch_goes_on(tmp_path, sp_tokenizer_dir):
    env = dict(os.environ, PYTHONPATH=with_warm_start(str(REPO)), OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "ck"), str(sp_tokenizer_dir)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    for kind, (short, long) in got["capped"].items():
        free_short, free_long = got["free"][kind]
        # fits: scored as without the cap (alone instead of padded beside the long one: summation order only)
        same = short[0] == free_short[0] if kind == "generate_until" else short[0] == pytest.approx(free_short[0],
                                                                                                   rel=1e-6)
        assert same and not short[1], (kind, short, free_short)
        assert not free_long[1] and free_long[0] == free_long[0], (kind, free_long)  # the reference is a score
        assert long[0] != long[0] or long[0] == "", (kind, long)  # NaN (a refused generation is the empty text)
        assert long[1].startswith("oomtask: out of memory at ") and " tokens on cpu (DefaultCPUAllocator: can't " \
               "allocate memory" in long[1] and long[1].endswith("scored NaN; a shorter length, or a device with " \
                                                                  "more memory, runs it"), (kind, long)
    log = p.stderr
    assert log.count("oomtask: out of memory at") == 1, log[-3000:]  # logged once per task and kind


def test_auto_n_returns_to_max_batch_size_at_n_points_and_cpu_batches_are_bounded_by_free_memory():
    """``batch_size=auto:2`` (refused before: "not supported by the longshort model"): a batch over 3 rows runs out of
    memory (fault injection); each half of the 20 requests starts at max_batch_size 16 and halves until 2 (first
    half) or 3 (second) fit, kept to its end; ``sizes`` records both. On a CPU a batch is cut to what the free memory
    holds under the estimate (5 rows of 1,000 bytes in a 5,000-byte budget) before it runs."""
    import torch

    from torchtune_longshort.eval.model.batch_size import BatchPlan, RowMemory

    rows, ran = [], []

    def run(chunk):
        rows.append(len(chunk))
        if len(chunk) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        ran.extend(chunk)

    plan = BatchPlan(16, 2, torch.device("cpu"))
    plan.run(torch.nn.Linear(1, 1), list(range(20)), lambda i: 1, run, lambda *a: None, lambda c: None)
    assert rows == [16, 8, 4, 2, 2, 2, 2, 2, 10, 5, 3, 3, 3, 1] and ran == list(range(20))
    assert plan.sizes == {0: 2, 1: 3}
    rows.clear()
    plan = BatchPlan(16, 1, torch.device("cpu"))
    plan.cpu_budget = lambda: 5000
    plan.run(torch.nn.Linear(1, 1), list(range(7)), lambda i: 1, lambda c: rows.append(len(c)), lambda *a: None,
             lambda c: None, RowMemory(token_bytes=1000))
    assert rows == [5, 2] and plan.sizes == {0: 5}
