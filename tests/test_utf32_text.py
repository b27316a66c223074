"""A corpus in UTF-32 (``local_text(..., encoding="utf-32")``): its text holds NUL bytes, which are its own, not a
sign of a binary file (a hand mutant of data/file_kinds that took only UTF-16 so survived, mutants28). The reference:
Python's codec decoding the same bytes."""

from __future__ import annotations

from torchtune_longshort.data.corpus import local_text
from torchtune_longshort.data.file_kinds import not_text


def test_a_utf32_file_is_text_in_its_encoding(tmp_path):
    text = "a book in UTF-32\nsecond line\n"
    for encoding in ("utf-32", "utf-32-le", "utf-32-be"):
        raw = text.encode(encoding)
        assert b"\x00" in raw
        (tmp_path / "book.txt").write_bytes(raw)
        assert not_text(raw, encoding) is None
        assert list(local_text(str(tmp_path / "book.txt"), encoding=encoding)()) == [raw.decode(encoding)]
    assert not_text(text.encode("utf-32-le"), "utf-8") == "binary (NUL bytes), not text"  # read as UTF-8: refused


def test_a_nul_in_a_utf8_files_first_byte_is_binary():
    head = b"\x00" + "text after it".encode("utf-8")
    assert "\x00" in head.decode("utf-8")  # decodes, yet no text: the rule is any NUL in the head
    assert not_text(head) == "binary (NUL bytes), not text"
