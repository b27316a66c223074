"""An evaluation stopped by a real signal (Ctrl-C = SIGINT to a child process): what it leaves is whole, and its
rerun goes on from there."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.model import CachingLM  # noqa: E402
from warm_start import with_warm_start  # noqa: E402

from torchtune_longshort.eval.model.adapter import LongShortLM  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TEXTS = [("", f"def f{i}(x):\n    return x * {i} + {i * i}\n" * (1 + i % 3)) for i in range(8)]

# the child scores TEXTS through lm-eval's response cache and is sent SIGINT (Ctrl-C) once it has scored `stop`
# requests, while it scores the next one
CHILD = """
import os, signal, sys
from lm_eval.api.instance import Instance
from lm_eval.api.model import CachingLM
import torchtune_longshort.eval.model.scoring as scoring
from torchtune_longshort.eval.model.adapter import LongShortLM
ckpt, tok, db, stop, texts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), eval(sys.argv[5])
project, calls = scoring.project_target_logprobs, []
def project_then_ctrl_c(*a, **kw):
    calls.append(1)
    if len(calls) > stop:
        os.kill(os.getpid(), signal.SIGINT)
    return project(*a, **kw)
scoring.project_target_logprobs = project_then_ctrl_c
lm = LongShortLM(checkpoint_dir=ckpt, tokenizer=tok, device="cpu", batch_size=1)
CachingLM(lm, db).loglikelihood([Instance("loglikelihood", {}, t, i) for i, t in enumerate(texts)])
"""


def _lm(ckpt, tok) -> LongShortLM:
    return LongShortLM(checkpoint_dir=str(ckpt), tokenizer=str(tok), device="cpu", batch_size=1)


def _requests():
    return [Instance("loglikelihood", {}, t, i) for i, t in enumerate(TEXTS)]


def test_use_cache_keeps_what_an_interrupted_run_scored(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """lm-eval's ``--use_cache`` is how an interrupted evaluation goes on: ``hf`` stores each result as it is scored
    (63 of 80 requests cached after a Ctrl-C at 63/80). The ``longshort`` model stored its results only when the whole
    request list was done: Ctrl-C at 13/80 left an empty cache, and the rerun began again from nothing."""
    db = tmp_path / "cache.db"
    # forked from the warm zygote (it signals itself: its own pid either way)
    env = dict(os.environ, PYTHONPATH=with_warm_start(str(REPO)), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", CHILD, str(tiny_llama2_dir), str(sp_tokenizer_dir), str(db), "3",
                        repr(TEXTS)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "KeyboardInterrupt" in p.stderr, (p.returncode, p.stderr[-2000:])
    rerun = CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir), str(db))
    asked = []
    score = rerun.lm.loglikelihood
    rerun.lm.loglikelihood = lambda r, **kw: asked.append(len(r)) or score(r, **kw)
    got = rerun.loglikelihood(_requests())
    assert asked and asked[0] <= len(TEXTS) - 3, asked  # the 3 scored before the signal are not asked again
    want = _lm(tiny_llama2_dir, sp_tokenizer_dir).loglikelihood(_requests(), disable_tqdm=True)
    assert all(math.isfinite(g[0]) for g in got)
    assert [g[0] for g in got] == pytest.approx([w[0] for w in want], rel=1e-6)
    for g, w in zip(got, want):  # the cached results keep their per-token values (the perplexity curve)
        assert g.token_logprobs == pytest.approx(w.token_logprobs, rel=1e-5)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_longshort_eval_stopped_by_a_signal_says_so_in_one_line(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, sig):
    """Ctrl-C ended ``longshort-eval`` with lm-eval's KeyboardInterrupt traceback and SIGTERM (a scheduler's) silently
    (exit -15); both now end in one line saying what the run left and how to go on, exit 128 + the signal, as the
    recipe and the study do. The signal goes to the process group once the requests are being scored (the command
    starts no process of its own then; forked from the tests' warm zygote, its relay passes the signal on)."""
    import time

    cli = str(Path(sys.executable).with_name("longshort-eval"))
    meta = '{"ppl_source": "stdlib", "ppl_num_samples": 300, "max_seq_lengths": [128, 256]}'
    p = subprocess.Popen([cli, "run", "--model", "longshort", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}", "--device", "cpu", "--tasks",
                          "longshort_ppl", "--metadata", meta, "--output_path", str(tmp_path / "out")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    for line in p.stdout:
        seen.append(line)
        if "Running loglikelihood requests" in line:
            time.sleep(0.2)
            os.killpg(p.pid, sig)
            break
    said = p.stdout.read().strip().splitlines()
    p.wait(timeout=120)
    assert p.returncode == 128 + sig, (p.returncode, seen[-3:], said[-3:])
    assert said[-1].startswith(f"longshort-eval: interrupted ({sig.name}): lm-eval writes results only when") and \
        "--use_cache" in said[-1], said[-3:]
    assert not any("Traceback" in line for line in seen + said)
