"""The BABILong generator's rows of one (qa, length[, depth]) are a function of the seed and those names alone: the
rows written for them alone are the reference for the same rows written among other tasks, lengths and depths, in
another order (a length added to a sweep, or ``--qa`` reordered, changed every other row set's rows)."""

from __future__ import annotations

import json

from torchtune_longshort.eval.tasks.babilong import generator as gen


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_row_set_is_the_same_alone_or_among_others(tmp_path, monkeypatch):
    # lengths counted in words (a tokenizer's counts take seconds here and draw nothing)
    monkeypatch.setattr(gen, "load_token_counter", lambda tok, label="tokenizer": lambda text: len(text.split()))
    tok = "words"
    gen.generate(tmp_path / "alone", ["qa1"], ["1k"], n=2, tokenizer=tok, seed=3)
    gen.generate(tmp_path / "among", ["qa2", "qa1"], ["0k", "1k"], n=2, tokenizer=tok, seed=3)
    alone = _rows(tmp_path / "alone" / "1k" / "qa1.jsonl")
    assert [r["qa"] for r in alone] == ["qa1", "qa1"] and alone[0] != alone[1]
    assert _rows(tmp_path / "among" / "1k" / "qa1.jsonl") == alone
    gen.generate(tmp_path / "d_alone", ["qa2"], ["1k"], n=1, depths=[50], tokenizer=tok, seed=3)
    gen.generate(tmp_path / "d_among", ["qa1", "qa2"], ["1k"], n=1, depths=[0, 50], tokenizer=tok, seed=3)
    at_50 = [r for r in _rows(tmp_path / "d_among" / "1k" / "qa2.jsonl") if r["depth"] == 50]
    assert at_50 == _rows(tmp_path / "d_alone" / "1k" / "qa2.jsonl") and len(at_50) == 1
    gen.generate(tmp_path / "seed4", ["qa1"], ["1k"], n=2, tokenizer=tok, seed=4)
    assert _rows(tmp_path / "seed4" / "1k" / "qa1.jsonl") != alone  # the seed still draws other rows
