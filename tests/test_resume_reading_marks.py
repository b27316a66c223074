"""Hand mutants of data/resume_reading that survived (mutants28): a data state without its ``reading`` mark taken as
mark 2 (a resume of a run saved before the mark, over a folder whose hidden file held a document then, refused as if
the user had edited the data), an earlier reading refused where the document count is the same (hidden files that
held no document: the same data), and an edited file at the saved position itself said read before it. The
references: the files on disk (which hold a document, which come before the position)."""

from __future__ import annotations

import pytest
from test_resume_digests import _tok, _warnings

from torchtune_longshort.data.corpus import local_text
from torchtune_longshort.data.dual_window import PackedTokenStream


def _folder(tmp_path, hidden_text):
    folder = tmp_path / "texts"
    folder.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (folder / name).write_text(f"{name} document " * 30)
    (folder / ".notes.txt").write_text(hidden_text)
    return folder


def _saved_before_the_marks(folder, documents):
    """A data state saved by a version before the ``reading`` mark (no such key), that counted ``documents``."""
    stream = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
    stream.take(10)
    state = stream.state_dict()
    state.pop("reading", None)
    state["documents"] = documents
    return state


def test_a_state_without_its_mark_over_a_hidden_document_names_the_earlier_reading(tmp_path):
    folder = _folder(tmp_path, "hidden notes")
    read_then = sum(1 for f in folder.iterdir() if f.read_text().strip())  # hidden files were read then: 4
    assert read_then == 4
    with pytest.raises(ValueError, match=r"cannot resume: this run was saved by an earlier torchtune_longshort, which "
                                         r"read a folder's hidden files too \(1 here"):
        PackedTokenStream(local_text(str(folder)), tokenize=_tok).load_state_dict(
            _saved_before_the_marks(folder, read_then))


def test_a_hidden_file_that_held_no_document_is_the_same_data(tmp_path, caplog):
    folder = _folder(tmp_path, "  \n")  # read then too, but no document: the count is the same
    read_then = sum(1 for f in folder.iterdir() if f.read_text().strip())
    assert read_then == 3
    assert _warnings(folder, _saved_before_the_marks(folder, read_then), caplog) == []  # resumed, nothing to say


def test_an_edited_file_at_the_saved_position_was_not_read_before_it(tmp_path, caplog):
    folder = _folder(tmp_path, "")
    (folder / ".notes.txt").unlink()
    stream = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
    stream.take(len(_tok((folder / "a.txt").read_text())))  # a.txt exactly: the position is b.txt's start
    state = stream.state_dict()
    assert (state["epoch"], state["docs_consumed"]) == (0, 1)
    (folder / "b.txt").write_text("EDITED " * 40)
    said = _warnings(folder, state, caplog)
    assert len(said) == 1 and "comes before it: the resumed run reads the edited text in this pass" in said[0]
    assert "read of it before it" not in said[0], said[0]  # the pass read a.txt alone before the position
