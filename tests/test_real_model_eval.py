"""The toolkit on a real pretrained model, evaluation: SmolLM2-135M-Instruct (Llama architecture, GQA 9/3, tied
embeddings, RoPE base 1e5, byte-level BPE ``tokenizer.json``), fetched from the package registry as a GGUF and
converted once (the ``real_model_dir`` fixture; cached in ``models.gguf_cache.cache_dir()``).

The reference is independent: lm-eval's own ``hf`` model (transformers) on the same folder. One sample per length
keeps the file to a minute or two on 2 CPU cores; the closing figures of the real-model issue use 20. The
misalignment metric (Eq. 4) on this model is computed, through the task pack, by the Table-1 quick run
(tests/test_study_table1.py), which replaced the misalignment CLI's finite-at-1k-2k-4k check here; the CLI itself is
tested on the tiny checkpoints (test_misalignment_metric.py, test_reliability_eval.py).
"""

from __future__ import annotations

import math

import pytest
from real_model_helpers import LENGTHS, evaluate

from torchtune_longshort.lengths import length_label

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.slow


def test_longshort_equals_hf_on_perplexity_and_passkey(real_model_dir):
    meta = {"ppl_source": "stdlib_tests", "ppl_num_samples": 1, "max_seq_lengths": LENGTHS,
            "passkey_depths": [50], "passkey_num_samples": 1}
    ours = evaluate("longshort", real_model_dir, ["longshort_ppl", "longshort_passkey"], meta, real_model_dir)
    theirs = evaluate("hf", real_model_dir, ["longshort_ppl", "longshort_passkey"], meta, real_model_dir)
    for L in LENGTHS:
        key = f"ppl_{length_label(L)},none"
        a, b = ours["longshort_ppl"][key], theirs["longshort_ppl"][key]
        assert math.isfinite(a) and 1 < a < 100, (L, a)  # a real model on Python source: single-digit-ish ppl
        assert a == pytest.approx(b, rel=1e-4), (L, a, b)
        acc = f"acc_{length_label(L)},none"
        assert ours["longshort_passkey"][acc] == theirs["longshort_passkey"][acc], (L, ours, theirs)
