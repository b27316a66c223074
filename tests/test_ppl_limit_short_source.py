"""``--limit N`` of longshort_ppl over a source that gives fewer sequences than ``ppl_num_samples`` (two text files,
20 asked): lm-eval builds the documents before it keeps the first N, so the length was NaN ('only 2 of
num_samples=20 ...') though N asks for no more than were cut. It is scored with the first N, as a source with enough
text would give them, and says so; an N past what was cut stays NaN with the reason."""

from __future__ import annotations

import json
import math

import pytest

from pack_helpers import run_pack

NOTE = "--limit {n} scores the first {n}, as a source with enough text would (without --limit this length is NaN"


def _meta(sp_tokenizer_dir, tmp_path, **extra):
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

    for i, text in enumerate(iter_stdlib_documents(min_bytes=3000, include_tests=False, limit=2)):
        (tmp_path / f"doc{i}.txt").write_text(text)  # a .txt file is one document: 2 sequences of 64 tokens
    return {"tokenizer": str(sp_tokenizer_dir), "ppl_data_files": str(tmp_path / "*.txt"), "max_seq_lengths": "64",
            **extra}


@pytest.mark.parametrize("limit", [1, 2])
def test_a_limit_below_num_samples_scores_the_first_sequences_of_a_short_source(sp_tokenizer_dir, tmp_path, caplog,
                                                                                 limit):
    from transformers import AutoTokenizer

    meta = _meta(sp_tokenizer_dir, tmp_path)
    with caplog.at_level("WARNING"):
        res = run_pack("longshort_ppl", meta, limit=limit)
    docs = [s["doc"] for s in res["samples"]["longshort_ppl"]]
    # the reference: a run asking for no more than the files give, without --limit
    enough = run_pack("longshort_ppl", {**meta, "ppl_num_samples": limit})
    assert [d["text"] for d in docs] == [s["doc"]["text"] for s in enough["samples"]["longshort_ppl"]]
    tok = AutoTokenizer.from_pretrained(str(sp_tokenizer_dir))
    assert [len(tok(d["text"], add_special_tokens=False)["input_ids"]) for d in docs] == [64] * limit
    # pack_helpers.TextLM scores a sequence -(its characters): the NLL, by hand, is the characters over the tokens
    by_hand = sum(len(d["text"]) for d in docs) / (64 * limit)
    got = res["results"]["longshort_ppl"]
    assert got["token_nll_64,none"] == pytest.approx(by_hand) and got["ppl_64,none"] == pytest.approx(
        math.exp(by_hand))
    assert "not_scored" not in res["configs"]["longshort_ppl"]
    assert NOTE.format(n=limit) in caplog.text and "only 2 of num_samples=20 sequences of length=64" in caplog.text


def test_a_limit_past_what_was_cut_leaves_the_length_nan_with_the_reason(sp_tokenizer_dir, tmp_path):
    res = run_pack("longshort_ppl", _meta(sp_tokenizer_dir, tmp_path), limit=3)
    assert math.isnan(res["results"]["longshort_ppl"]["ppl_64,none"])
    reasons = json.dumps(res["configs"]["longshort_ppl"]["not_scored"])
    assert "only 2 of num_samples=20 sequences of length=64" in reasons
