"""The toolkit on a real pretrained model, evaluation: SmolLM2-135M-Instruct (Llama architecture, GQA 9/3, tied
embeddings, RoPE base 1e5, byte-level BPE ``tokenizer.json``), fetched from the package registry as a GGUF and
converted once (the ``real_model_dir`` fixture; cached under ``$LONGSHORT_CACHE`` or ``~/.cache/torchtune_longshort``).

The reference is independent: lm-eval's own ``hf`` model (transformers) on the same folder. One sample per length
keeps the file to a minute or two on 2 CPU cores; the closing figures of the real-model issue use 20.
"""

from __future__ import annotations

import json
import math

import pytest
from real_model_helpers import LENGTHS, evaluate

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.slow


def test_longshort_equals_hf_on_perplexity_and_passkey(real_model_dir):
    meta = {"ppl_source": "stdlib_tests", "ppl_num_samples": 1, "max_seq_lengths": LENGTHS,
            "passkey_depths": [50], "passkey_num_samples": 1}
    ours = evaluate("longshort", real_model_dir, ["longshort_ppl", "longshort_passkey"], meta, real_model_dir)
    theirs = evaluate("hf", real_model_dir, ["longshort_ppl", "longshort_passkey"], meta, real_model_dir)
    for L in LENGTHS:
        key = f"ppl_{L // 1024}k,none"
        a, b = ours["longshort_ppl"][key], theirs["longshort_ppl"][key]
        assert math.isfinite(a) and 1 < a < 100, (L, a)  # a real model on Python source: single-digit-ish ppl
        assert a == pytest.approx(b, rel=1e-4), (L, a, b)
        acc = f"acc_{L // 1024}k,none"
        assert ours["longshort_passkey"][acc] == theirs["longshort_passkey"][acc], (L, ours, theirs)


def test_misalignment_cli_is_finite_at_1k_2k_4k(real_model_dir, tmp_path):
    from torchtune_longshort.metrics.cli import main

    for L in (1024, 2048, 4096):
        out = tmp_path / f"mis_{L}.json"
        assert main(["--checkpoint-dir", str(real_model_dir), "--data", "stdlib", "--length", str(L),
                     "--num-samples", "1", "--output", str(out)]) == 0
        res = json.loads(out.read_text())
        assert res["model_family"] == "llama_tied" and res["tokenizer"].startswith("hf_json")
        for d in ("sce", "jeffreys", "js"):
            assert math.isfinite(res["summary"][d]["mean"]) and res["summary"][d]["mean"] >= 0, (L, d, res["summary"])
