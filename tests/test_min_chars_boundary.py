"""``iter_texts``' ``min_chars`` skips only shorter documents: one of exactly ``min_chars`` characters is read (a
document of few characters can hold many tokens: byte-level tokens of multi-byte text)."""

from __future__ import annotations

from torchtune_longshort.eval.tasks.common.long_text import iter_texts


def test_a_document_of_exactly_min_chars_is_kept(tmp_path):
    texts = ["日本語の文", "短い"]
    for i, text in enumerate(texts):
        (tmp_path / f"{i}.txt").write_text(text, encoding="utf-8")
    got = list(iter_texts(data_files=str(tmp_path), min_chars=len(texts[0])))
    assert got == [texts[0]]
    assert len(texts[0].encode("utf-8")) > 2 * len(texts[0])  # more bytes than characters
