"""The misalignment task (paper Eq. 4) end to end through lm-eval's CLI, against divergences computed by hand
from transformers' next-token distributions of the same checkpoint."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("lm_eval")


def _by_hand(hf, ids, l1, l2):
    with torch.no_grad():
        p = F.log_softmax(hf(torch.tensor([ids[-l1:]])).logits[0, -1].float(), -1)
        q = F.log_softmax(hf(torch.tensor([ids[-l2:]])).logits[0, -1].float(), -1)
    P, Q = p.exp(), q.exp()
    sce = -float((Q * p).sum() + (P * q).sum())
    jeff = float(((P - Q) * (p - q)).sum())
    M = (P + Q) / 2
    js = 0.5 * float((P * (p - M.log())).sum() + (Q * (q - M.log())).sum())
    return {"sce": sce, "jeffreys": jeff, "js": js}


def test_dataset_draws_suffix_lengths_in_the_inclusive_range(sp_tokenizer_dir):
    from torchtune_longshort.eval.tasks.misalignment.task import misalignment_dataset

    ds = misalignment_dataset(max_seq_lengths="64", tokenizer=str(sp_tokenizer_dir), mis_num_samples=6)["test"]
    assert len(ds) == 6 and all(32 <= r["l1"] <= 64 and 32 <= r["l2"] <= 64 for r in ds)
    # both ends of [L/2, L] come up (a draw from [L/2 + 1, L] or [L/2, L - 1] passed the line above)
    small = misalignment_dataset(max_seq_lengths="4", tokenizer=str(sp_tokenizer_dir), mis_num_samples=30)["test"]
    assert {r["l1"] for r in small} == {r["l2"] for r in small} == {2, 3, 4}


def test_adapter_answers_next_token_divergence(tiny_llama2_dir, sp_tokenizer_dir):
    from lm_eval.api.instance import Instance
    from transformers import LlamaForCausalLM

    from torchtune_longshort.eval.model.adapter import LongShortLM
    from torchtune_longshort.eval.tasks.misalignment.task import misalignment_dataset

    lm = LongShortLM(checkpoint_dir=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu")
    docs = misalignment_dataset(max_seq_lengths=[64], tokenizer=str(sp_tokenizer_dir), mis_num_samples=2)["test"]
    reqs = [Instance("next_token_divergence", d, (d["text"], {"l1": d["l1"], "l2": d["l2"]}), 0) for d in docs]
    got = lm.next_token_divergence(reqs, disable_tqdm=True)
    hf = LlamaForCausalLM.from_pretrained(str(tiny_llama2_dir), dtype=torch.float32).eval()
    for d, g in zip(docs, got):
        ref = _by_hand(hf, lm.tok_encode(d["text"], add_special_tokens=False), d["l1"], d["l2"])
        for k in ref:
            assert g[k] == pytest.approx(ref[k], rel=1e-4, abs=1e-6)


@pytest.mark.slow
def test_misalignment_end_to_end(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from transformers import LlamaForCausalLM

    from torchtune_longshort.eval.cli_run import run_cli
    from torchtune_longshort.eval.report.run_files import samples_of
    from torchtune_longshort.eval.model.adapter import LongShortLM

    res = run_cli(["run", "--model", "longshort", "--model_args",
                   f"checkpoint_dir={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}", "--device", "cpu",
                   "--tasks", "longshort_misalignment",
                   "--metadata",
                   '{"mis_num_samples": 3, "mis_max_seq_lengths": "128,512", "mis_divergences": "js,sce"}',
                   "--output_path",
                   str(tmp_path), "--log_samples"])
    r = res["results"]["longshort_misalignment"]
    assert math.isnan(r["sce_512,none"])  # past the 256 positions: refused, run goes on
    rows = [x for x in samples_of(tmp_path, "longshort_misalignment") if x["doc"]["length"] == 128]
    assert len(rows) == 3
    lm = LongShortLM(checkpoint_dir=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu")
    hf = LlamaForCausalLM.from_pretrained(str(tiny_llama2_dir), dtype=torch.float32).eval()
    refs = [_by_hand(hf, lm.tok_encode(x["doc"]["text"], add_special_tokens=False), x["doc"]["l1"], x["doc"]["l2"])
            for x in rows]
    for k in ("sce", "js"):  # the divergences asked for, as a comma list (a string was read letter by letter)
        assert r[f"{k}_128,none"] == pytest.approx(sum(x[k] for x in refs) / 3, rel=1e-4, abs=1e-6)
    assert "jeffreys_128,none" not in r


@pytest.mark.parametrize("key, value", [("mis_divergences", "foo"), ("mis_divergences", ["sce", "kl"]),
                                        ("mis_seed", "abc")])
def test_a_bad_misalignment_setting_is_refused_before_lm_eval_starts(tiny_llama2_dir, sp_tokenizer_dir, tmp_path,
                                                                     key, value):
    # it failed after the model had loaded and other tasks had run, naming no key (divergence='f' is not known), or
    # was taken without a word (mis_seed)
    import json
    import re

    from torchtune_longshort.eval.cli_run import run_cli

    with pytest.raises(ValueError, match=rf"^--metadata {re.escape(f'{key}={value!r}')}: expected"):
        run_cli(["run", "--model", "longshort", "--model_args",
                 f"checkpoint_dir={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}", "--device", "cpu",
                 "--tasks", "longshort_ppl,longshort_misalignment", "--metadata", json.dumps({key: value}),
                 "--output_path", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_options_that_would_put_text_before_the_sequence_are_ignored(tiny_llama2_dir, sp_tokenizer_dir, caplog):
    """The task scores suffixes of its own L-token texts: --num_fewshot, --apply_chat_template and
    --system_instruction are ignored with one warning each (before: --apply_chat_template ran the longshort model's
    missing chat template and the run ended in a traceback) and the values are the plain run's."""
    from pack_helpers import run_pack

    from torchtune_longshort.eval.model.adapter import LongShortLM
    from torchtune_longshort.eval.tasks.common.unavailable import MODEL_KEY

    lm = LongShortLM(checkpoint_dir=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu")
    meta = {"tokenizer": str(sp_tokenizer_dir), "mis_num_samples": 2, "max_seq_lengths": "64", MODEL_KEY: "longshort"}

    def run(**kw):
        res = run_pack("longshort_misalignment", meta, model=lm, **kw)
        return res["results"]["longshort_misalignment"], res["configs"]["longshort_misalignment"]

    plain, _ = run()
    with caplog.at_level("WARNING"):
        other, config = run(num_fewshot=1, apply_chat_template=True, system_instruction="Be brief.")
    assert {k: other[k] for k in ("sce_64,none", "js_64,none")} == {k: plain[k] for k in ("sce_64,none", "js_64,none")}
    for option in ("--num_fewshot", "--apply_chat_template", "--system_instruction"):
        assert caplog.text.count(f"longshort_misalignment: {option} ignored") == 1
    assert config["ignored_options"] == ["--num_fewshot", "--apply_chat_template", "--system_instruction"]


def test_predict_only_writes_the_divergences_without_scoring_them(tiny_llama2_dir, sp_tokenizer_dir):
    # lm-eval's --predict_only swaps the task's process_results for its own, which knows no next_token_divergence:
    # the run ended in a ValueError after every request had run, with no results file (ppl's outputs lost with it)
    from pack_helpers import run_pack

    from torchtune_longshort.eval.model.adapter import LongShortLM
    from torchtune_longshort.eval.tasks.common.unavailable import MODEL_KEY

    lm = LongShortLM(checkpoint_dir=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu")
    meta = {"tokenizer": str(sp_tokenizer_dir), "mis_num_samples": 2, "max_seq_lengths": "64", MODEL_KEY: "longshort"}
    res = run_pack("longshort_misalignment", meta, model=lm, predict_only=True)
    assert res["results"]["longshort_misalignment"]["bypass,none"] == 999  # lm-eval's own predict-only value
    (rows,) = res["samples"].values()
    assert len(rows) == 2 and all(set(r["resps"][0][0]) == {"sce", "jeffreys", "js"} for r in rows)


def test_use_cache_answers_a_rerun_from_the_cache(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, monkeypatch):
    # lm-eval's CachingLM caches only loglikelihood / loglikelihood_rolling / generate_until and passed
    # next_token_divergence through: a --use_cache rerun computed every divergence again
    from lm_eval.api.instance import Instance
    from lm_eval.api.model import CachingLM

    import torchtune_longshort.eval.model.adapter as adapter
    import torchtune_longshort.eval.model.divergence as divergence
    from torchtune_longshort.eval.tasks.misalignment.task import misalignment_dataset

    docs = misalignment_dataset(max_seq_lengths=[64], tokenizer=str(sp_tokenizer_dir), mis_num_samples=2)["test"]
    reqs = [Instance("next_token_divergence", d, (d["text"], {"l1": d["l1"], "l2": d["l2"]}), 0) for d in docs]

    def model():
        return adapter.LongShortLM(checkpoint_dir=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu")

    first = CachingLM(model(), str(tmp_path / "cache.db")).next_token_divergence(reqs)
    assert first == model().next_token_divergence(reqs)  # the cache changes no value

    def computed(*args, **kwargs):
        raise AssertionError("computed again instead of read from the cache")

    monkeypatch.setattr(divergence, "suffix_misalignment", computed)
    assert CachingLM(model(), str(tmp_path / "cache.db")).next_token_divergence(reqs) == first


def test_unscored_rows_report_the_divergences_asked_for_only():
    """Under a model other than longshort every row is unscored: its NaN was reported under sce, jeffreys and js
    whatever mis_divergences asked for; now under the asked ones (a dotted path of a function included)."""
    from pack_helpers import TextLM, run_pack

    class RollingLM(TextLM):
        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            return [-1.0 for _ in requests]  # the placeholder rows send none

    own = "torchtune_longshort.loss.divergences.jeffreys_per_position"
    meta = {"mis_num_samples": 1, "max_seq_lengths": "64", "mis_divergences": f"js,{own}", "lm_eval_model": "hf"}
    r = run_pack("longshort_misalignment", meta, model=RollingLM())["results"]["longshort_misalignment"]
    scores = {k for k in r if k.endswith(",none") and "_stderr" not in k}
    assert scores == {"js_64,none", f"{own}_64,none"}, r
    assert all(math.isnan(r[k]) for k in scores)
