"""A hand mutant of data/resume_reading that survived (mutants41): a data state saved at the very mark that changed a
source's reading (``reading: 3``, the version that first read a text file's '\\r\\n' as '\\n') taken as saved before it,
and its resume warned that its text differed by its line ends. The reference: Python's text mode, which both that
version and this one read the file with (the documents the state counted are the ones read now)."""

from __future__ import annotations

import logging

import pytest
from test_resume_digests import _tok

from torchtune_longshort.data.corpus import local_text
from torchtune_longshort.data.dual_window import PackedTokenStream


@pytest.mark.parametrize("saved_at, warned", [(2, True), (3, False)])
def test_a_state_saved_at_the_mark_itself_reads_the_same_text(tmp_path, caplog, saved_at, warned):
    folder = tmp_path / "texts"
    folder.mkdir()
    f = folder / "crlf.txt"
    f.write_bytes(b"line one\r\nline two\r\n" * 20)
    with open(f, newline="") as raw, open(f) as text_mode:  # '\r\n' on disk, '\n' as Python's text mode reads it
        assert "\r" in raw.read() and "\r" not in text_mode.read()
    stream = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
    stream.take(10)
    state = dict(stream.state_dict(), reading=saved_at)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        PackedTokenStream(local_text(str(folder)), tokenize=_tok).load_state_dict(state)
    said = [r.getMessage() for r in caplog.records if "line ends" in r.getMessage()]
    assert bool(said) is warned, said
