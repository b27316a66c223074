"""Two hand mutants of data/resume_reading survived every test that reaches it (mutants16): the resume warning for an
edited file still to come in the pass adding '(and what pass 0 read of it before it from pass 1 on)' whatever the
file held before the position (a file whose documents all come after it was said to have been read in part), and a
data state of mark 2 over a text file of bare '\\r' line ends (old Mac) resumed without the warning that its text is
read otherwise (only '\\r\\n' looked for). The references: the source's own documents before the saved position
(which file each came from, by its text), and Python's text mode against newline='' on the same file."""

from __future__ import annotations

import json

import pytest
from test_resume_digests import _tok, _warnings

from torchtune_longshort.data.corpus import local_text
from torchtune_longshort.data.dual_window import PackedTokenStream
from torchtune_longshort.data.resume_reading import line_ends_read_otherwise

MARK = "EDITED "


def _said(folder, state, caplog):
    said = _warnings(folder, state, caplog)
    assert len(said) == 1, said
    return said[0]


def test_an_edited_file_is_said_read_before_the_position_only_where_it_was(tmp_path, caplog):
    folder = tmp_path / "texts"
    folder.mkdir()
    texts = {"a.jsonl": "\n".join(json.dumps({"text": f"a.jsonl record {i} " * 40}) for i in range(3)) + "\n",
             "b.txt": "b.txt document " * 40}
    for name, text in texts.items():
        (folder / name).write_text(text)
    stream = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
    stream.take(300)
    state = stream.state_dict()
    k = state["docs_consumed"]
    before = list(local_text(str(folder))())[:k]  # the documents the pass read before the saved position
    assert (state["epoch"], k) == (0, 1)
    for name, text in texts.items():
        edited = "".join(json.dumps({"text": MARK * (40 + i)}) + "\n" for i in range(3))
        (folder / name).write_text(MARK * 40 if name.endswith(".txt") else edited)
        said = _said(folder, state, caplog)
        (folder / name).write_text(text)
        read_before = any(doc.startswith(name) for doc in before)
        assert "comes before it: the resumed run reads the edited text in this pass" in said, said
        assert ("(and what pass 0 read of it before it from pass 1 on)" in said) == read_before, (name, said)


@pytest.mark.parametrize("ends", [b"\r\n", b"\r", b"\n"])
def test_a_text_files_line_ends_are_said_read_otherwise_as_pythons_text_mode_reads_them(tmp_path, ends):
    f = tmp_path / "book.txt"
    f.write_bytes(ends.join([b"line one", b"line two", b"line three"]) + ends)
    with open(f, encoding="utf-8") as text, open(f, encoding="utf-8", newline="") as raw:
        read_otherwise = text.read() != raw.read()  # this version's reading against the one before mark 3
    clause = line_ends_read_otherwise([f], "utf-8")
    assert (clause is not None) == read_otherwise, (ends, clause)
    if clause:
        assert str(f) in clause
