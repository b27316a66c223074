"""The data state's file digests (data/file_paths.file_digests: each file's size and first MiB) as a resume reads
them: an edit past the first MiB that changes the size, and one in the first MiB's last byte, are each named in the
one warning; a file added that holds no document (the count the same) is said too. The digests' own bytes are not
the reference: the files' bytes are."""

import logging

from torchtune_longshort.data.corpus import local_text
from torchtune_longshort.data.dual_window import PackedTokenStream

MIB = 1 << 20  # the documented reach: "its size or first MiB"


def _tok(text):
    return [1] + [ord(c) % 256 for c in text] + [2]


def _warnings(folder, state, caplog):
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        PackedTokenStream(local_text(str(folder)), tokenize=_tok).load_state_dict(state)
    return [r.getMessage() for r in caplog.records if "since the run saved its data state" in r.getMessage()]


def _state_after_reading(folder):
    stream = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
    stream.take(300)
    return stream.state_dict()


def _three_documents_read(tmp_path):
    """A folder of three documents and the data state of a run that read into its second."""
    folder = tmp_path / "texts"
    folder.mkdir()
    for i in range(3):
        (folder / f"doc{i}.txt").write_text(f"document {i} " * 40)
    return folder, _state_after_reading(folder)


def test_an_edit_at_the_first_mib_s_last_byte_or_past_it_is_named(tmp_path, caplog):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("first document " * 30)
    big = folder / "b.txt"
    text = bytearray(b"x" * (MIB + 100))
    big.write_bytes(bytes(text))
    stream = PackedTokenStream(local_text(str(folder)), tokenize=_tok)
    stream.take(200)  # within a.txt
    state = stream.state_dict()
    assert _warnings(folder, state, caplog) == []
    text[MIB - 1:MIB] = b"y"  # the first MiB's last byte, the size kept
    big.write_bytes(bytes(text))
    said = _warnings(folder, state, caplog)
    assert len(said) == 1 and f"{big} changed since" in said[0], said
    big.write_bytes(b"x" * (MIB + 100) + b" appended")  # the first MiB as saved, the size not
    said = _warnings(folder, state, caplog)
    assert len(said) == 1 and f"{big} changed since" in said[0], said
    big.write_bytes(b"x" * (MIB + 100))
    assert _warnings(folder, state, caplog) == []


def test_a_file_added_that_holds_no_document_is_said(tmp_path, caplog):
    """It was said 'its files are not the 3 the run read since the run saved its data state ...; its saved position
    ... would land on the edited text', of no edited text: the file added and that nothing changes are said now."""
    folder, state = _three_documents_read(tmp_path)
    read = list(local_text(str(folder))())
    blank = folder / "a_blank.txt"
    blank.write_text("  \n")  # sorted first, no document: the count is the same
    assert list(local_text(str(folder))()) == read  # the reference: the documents read are the same
    said = _warnings(folder, state, caplog)
    position = "its saved position (document 1 of pass 0) would land on"
    same = (f"(the document count and the 3 other files are the same: {position} the same document, and the run "
            "reads what it read before; nothing to do)")
    assert said == [f"resume: dataset local_text({str(folder)!r}, 4 files): {blank}, added since the run saved its "
                    f"data state, holds no document {same}"], said
    (folder / "z_blank.txt").write_text("\n")
    said = _warnings(folder, state, caplog)
    assert len(said) == 1 and f"{blank} (and 1 more), added since the run saved its data state, hold no" in said[0]
    blank.unlink()
    (folder / "z_blank.txt").unlink()
    blank.write_text("  \n")  # a run that read a blank file, then gone
    with_blank = _state_after_reading(folder)
    blank.unlink()
    said = _warnings(folder, with_blank, caplog)
    assert len(said) == 1 and "1 file the run read, which held no document, is gone since the run saved its " \
        f"data state {same}" in said[0], said
    blank.write_text("  \n")
    (folder / "doc2.txt").write_text("edited " * 40)  # and one edited: the edited text, as before
    said = _warnings(folder, state, caplog)
    assert len(said) == 1 and "its 4 files are not the 3 the run read (files added or removed, others changed" in \
        said[0] and "would land on the edited text" in said[0], said


def test_two_edited_files_are_both_counted(tmp_path, caplog):
    folder, state = _three_documents_read(tmp_path)
    (folder / "doc1.txt").write_text("edited " * 40)
    (folder / "doc2.txt").write_text("edited too " * 40)
    said = _warnings(folder, state, caplog)
    assert len(said) == 1 and f"{folder / 'doc1.txt'} (and 1 more file) changed since" in said[0], said


def test_digests_of_a_source_without_its_file_list_are_said_unmatched():
    """A source whose files are not listed (none given beside the digests): a count of digests that differs is said
    as files added or removed, not named by an index into the list (which has none)."""
    from torchtune_longshort.data.file_paths import DIGEST_BYTES
    from torchtune_longshort.data.resume_reading import edited_files

    a, b, c = (bytes([k]) * DIGEST_BYTES for k in (1, 2, 3))
    said = edited_files((), a + b, a + b + c, "it would land on")
    assert said.startswith("its 3 files are not the 2 the run read (files added or removed"), said


def test_one_other_file_and_the_document_count_are_the_same(tmp_path, caplog):
    """A source of one document read, then a blank file added: 'the document count and the 1 other file is the same'
    (the verb agreed with the count, not with its two subjects); 'are', as for 3 other files."""
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "doc.txt").write_text("document " * 60)
    state = _state_after_reading(folder)
    (folder / "a_blank.txt").write_text("\n")  # no document: the count is the same
    said = _warnings(folder, state, caplog)
    assert len(said) == 1 and "(the document count and the 1 other file are the same:" in said[0], said
