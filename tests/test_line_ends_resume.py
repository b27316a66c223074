"""A data state saved before mark 3 over local_text files holding '\\r' line ends: that version read them as they are,
this one as '\\n'. The position lands on the same document (the count is the same), its text differs by its line
ends: said once, naming the first such text file; not refused. Record files (JSON, whose strings are unchanged) are not
named."""

import json
import logging

from torchtune_longshort.data.corpus import local_text
from torchtune_longshort.data.dual_window import PackedTokenStream


def _tok(text):
    return [1] + [ord(c) % 256 for c in text] + [2]


def _said(caplog):
    return [r.getMessage() for r in caplog.records if "line ends" in r.getMessage()]


def test_an_earlier_state_over_crlf_text_is_resumed_with_one_warning_naming_the_file(tmp_path, caplog):
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "a.json").write_bytes(json.dumps([{"text": "record one"}]).replace(", ", ",\r\n").encode())
    (folder / "b.txt").write_bytes(b"plain book\n" * 20)
    (folder / "c.txt").write_bytes(b"windows book\r\n" * 20)
    stream = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
    stream.take(40)
    state = stream.state_dict()
    with caplog.at_level(logging.WARNING):
        PackedTokenStream(local_text(str(folder)), tokenize=_tok).load_state_dict(state)  # this version's
        assert _said(caplog) == []
        again = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
        again.load_state_dict({**state, "reading": 2})
    said = _said(caplog)
    assert len(said) == 1, said
    assert said[0].startswith("resume: this run was saved by an earlier torchtune_longshort, which read a text "
                              "file's '\\r\\n' and '\\r' line ends as they are (" + str(folder / "c.txt")
                              + " holds them; this version reads them as '\\n', as Python's text mode does): dataset "
                              "local_text("), said[0]
    assert said[0].endswith("(document 2 of pass 0) would land on the same document, its text differing by its line "
                            "ends. To train on the text as the run read it, finish this run with the version that "
                            "started it"), said[0]
    assert again.take(30) == stream.take(30)  # resumed where it stood


def test_an_earlier_state_over_text_without_cr_says_nothing(tmp_path, caplog):
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "a.json").write_bytes(b'[{"text": "record\\r one"},\r\n{"text": "two"}]')  # a record file: not read
    (folder / "b.txt").write_bytes(b"plain book\n" * 20)
    stream = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
    stream.take(40)
    with caplog.at_level(logging.WARNING):
        PackedTokenStream(local_text(str(folder)), tokenize=_tok).load_state_dict({**stream.state_dict(), "reading": 2})
    assert _said(caplog) == []
