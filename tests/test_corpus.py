"""Long-corpus loaders on local files only (the Hugging Face path through a local `json` builder)."""

from __future__ import annotations

import json
import re

import pytest

from torchtune_longshort.data.corpus import hf_text, local_text, stdlib
from torchtune_longshort.data.fixed_length import fixed_length_sequences
from torchtune_longshort.data.dual_window import PackedTokenStream


def test_local_file_dir_jsonl(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("alpha text")
    (tmp_path / "d" / "b.md").write_text("beta text")
    (tmp_path / "d" / "skip.bin").write_bytes(b"\0")
    (tmp_path / "d" / "c.jsonl").write_text(json.dumps({"text": "gamma"}) + "\n\n" + json.dumps({"text": "delta"}) + "\n")
    assert list(local_text(str(tmp_path / "d" / "a.txt"))()) == ["alpha text"]
    src = local_text(str(tmp_path / "d"))
    assert list(src()) == ["alpha text", "beta text", "gamma", "delta"]
    assert list(src()) == list(src())  # re-iterable: a new pass each call (epochs, resume)


def test_a_folders_files_left_out_by_their_suffix_are_named(tmp_path, caplog):
    """A folder of books, some saved without a suffix or as ``.text``: they were left out without a word (the run
    trained on the others). Now one warning names how many, the first and the key that takes them; the reference:
    with their suffixes given, they are read."""
    (tmp_path / "d" / ".git").mkdir(parents=True)
    for name, text in (("a.txt", "alpha"), ("book", "beta"), ("c.text", "gamma"), (".DS_Store", "x"),
                       (".git/x.pack", "y")):
        (tmp_path / "d" / name).write_text(text)
    with caplog.at_level("WARNING"):
        assert list(local_text(str(tmp_path / "d"))()) == ["alpha"]
    said = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
    assert len(said) == 1 and re.search(r"^dataset.path='.*d': 2 files in it are not read, their suffix not one of "
                                        r"\['.txt', .*\] \(first: .*d/book\); add theirs to dataset.suffixes "
                                        r"to read them$", said[0])
    caplog.clear()
    (tmp_path / "d" / ".DS_Store").unlink()  # suffix "" (the book's) reads it too
    with caplog.at_level("WARNING"):
        assert list(local_text(str(tmp_path / "d"), suffixes=[".txt", "", ".text"])()) == ["alpha", "beta", "gamma"]
    assert not [r for r in caplog.records if "not read" in r.getMessage()]


def test_a_folder_is_walked_once_to_read_it_and_name_what_it_leaves_out(tmp_path, monkeypatch, caplog):
    # the warning of files left out walked the folder again after resolve_files had (a folder of many files: two
    # walks at start-up); now one walk gives both, and the same warning
    from pathlib import Path

    (tmp_path / "d").mkdir()
    for name in ("a.txt", "book", ".DS_Store"):
        (tmp_path / "d" / name).write_text(name)
    walks, rglob = [], Path.rglob
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: walks.append(self) or rglob(self, pattern))
    with caplog.at_level("WARNING"):
        assert list(local_text(str(tmp_path / "d"))()) == ["a.txt"]
    assert walks == [tmp_path / "d"], walks
    said = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
    assert len(said) == 1 and re.search(r": 1 file in it is not read, its suffix not one of .*\(first: .*d/book\); "
                                        r"add it to dataset.suffixes to read it$", said[0]), said


def test_a_byte_order_mark_is_no_part_of_a_document_and_one_suffix_is_a_string(tmp_path):
    # a BOM became a U+FEFF token of the first document, and refused (or, skipping, dropped) a JSON file's first line;
    # suffixes=".txt" was read as the suffixes '.', 't', 'x', 't'
    bom = "\ufeff"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text(bom + "hello", encoding="utf-8")
    (tmp_path / "d" / "b.jsonl").write_text(bom + json.dumps({"text": "first"}) + "\n", encoding="utf-8")
    (tmp_path / "d" / "c.json").write_text(bom + json.dumps([{"text": "row"}]), encoding="utf-8")
    (tmp_path / "d" / "e.md").write_text("not a .txt file")
    assert list(local_text(str(tmp_path / "d"), suffixes=[".txt", ".json"])()) == ["hello", "first", "row"]
    # a folder's record files (.jsonl, .json, .parquet) are read whatever the suffixes: a folder of .json files was
    # refused as holding no files
    assert list(local_text(str(tmp_path / "d"), suffixes=".txt")()) == ["hello", "first", "row"]
    (tmp_path / "f.txt").write_bytes(b"\xff\xfeh\x00i\x00")  # a UTF-16 mark is no UTF-8 text: still refused
    with pytest.raises(ValueError, match=r"UTF-16 text \(its byte-order mark\), not UTF-8"):
        local_text(str(tmp_path / "f.txt"))


def test_errors_name_the_field(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset.path='.*nope' does not exist"):
        local_text(str(tmp_path / "nope"))
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps({"body": "t"}) + "\n")
    with pytest.raises(ValueError, match=r"no text field 'text'.*\['body'\]"):
        local_text(str(f))
    assert list(local_text(str(f), text_field="body")()) == ["t"]


def test_hf_path_with_local_json(tmp_path):
    f = tmp_path / "books.jsonl"
    f.write_text("".join(json.dumps({"text": f"book {i} " * 20, "id": i}) + "\n" for i in range(5)))
    for streaming in (True, False):
        src = hf_text("json", data_files=str(f), streaming=streaming)
        docs = list(src())
        assert len(docs) == 5 and docs[2].startswith("book 2")
    with pytest.raises(ValueError, match=r"no text field 'content'.*\['id', 'text'\]"):
        hf_text("json", data_files=str(f), text_field="content")


def test_hf_records_can_be_skipped_in_place(tmp_path):
    """skip_bad_records: a record whose text field holds no string keeps its place in the stream (a position counts
    it) and adds no tokens, so the packed tokens are those of the data without it; a source that can read none of its
    first records is refused, naming the first."""
    from torchtune_longshort.data.text_files import SkippedRecord

    rows = [{"text": f"book {i} " * 20} for i in range(5)]
    f, without = tmp_path / "books.jsonl", tmp_path / "without.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows[:2] + [{"text": None}] + rows[3:]))
    without.write_text("".join(json.dumps(r) + "\n" for r in rows[:2] + rows[3:]))
    with pytest.raises(ValueError, match=r"books\.jsonl:3: field 'text' holds NoneType 'None'"):
        list(hf_text("json", data_files=str(f))())
    src = hf_text("json", data_files=str(f), skip_bad_records=True)
    docs = list(src())
    assert isinstance(docs[2], SkippedRecord) and "books.jsonl:3: field 'text'" in docs[2].message
    tok = lambda t: [1] + [ord(c) % 256 for c in t] + [2]  # noqa: E731
    stream = PackedTokenStream(src, tokenize=tok)
    reference = PackedTokenStream(hf_text("json", data_files=str(without)), tokenize=tok)
    assert stream.take(200) == reference.take(200) and stream.take(150) == reference.take(150)
    assert (stream.records_skipped, stream.docs_consumed, reference.docs_consumed) == (1, 4, 3)
    assert len(stream.new_skips()) == 1 and stream.new_skips() == []
    with pytest.raises(ValueError, match=r"none of its first 4 records can be read \(skip_bad_records=True skips a "
                                         r"bad record, not a source of them\); the first: .*without\.jsonl:1: no text "
                                         r"field 'content'"):
        hf_text("json", data_files=str(without), text_field="content", skip_bad_records=True)


def test_packing_and_validation_split(tmp_path):
    src = stdlib(limit=3, include_tests=False)
    tok = lambda t: [1] + [ord(c) % 256 for c in t] + [2]  # noqa: E731
    val = fixed_length_sequences(src, tok, seq_len=128, num_sequences=4, vocab_size=256)
    assert val.shape == (4, 128)
    stream = PackedTokenStream(src, tokenize=tok)
    assert stream.take(4 * 128) == val.flatten().tolist()  # the same packed stream, cut into fixed rows
    with pytest.raises(ValueError, match="holds only"):
        fixed_length_sequences(local_text(str(_one(tmp_path))), tok, seq_len=64, num_sequences=5)
    # the stream's other errors are named by the source's setting (they named nothing, or "validation.num_sequences")
    with pytest.raises(ValueError, match=r"^--data: token id \d+ in document 1 .* outside the model vocabulary"):
        fixed_length_sequences(src, tok, seq_len=64, num_sequences=1, vocab_size=10, where="--data")


def _one(tmp_path):
    p = tmp_path / "one.txt"
    p.write_text("short")
    return p


def test_stdlib_test_packages_are_the_held_out_complement():
    """include_tests=False and include_tests="only" split the stdlib into two disjoint parts that make up all of it;
    the eval source ``stdlib_tests`` reads exactly the held-out part."""
    from torchtune_longshort.data.stdlib_corpus import TEST_PACKAGES, stdlib_dir, stdlib_source_files
    from torchtune_longshort.eval.tasks.common.long_text import iter_texts

    train, held, every = (set(stdlib_source_files(include_tests=v)) for v in (False, "only", True))
    assert train and held and not (train & held) and train | held == every
    assert all(f.relative_to(stdlib_dir()).parts[0] in TEST_PACKAGES for f in held)
    first = sorted(held, key=str)[0].read_text(encoding="utf-8", errors="replace")
    assert next(iter(iter_texts("stdlib_tests"))) == first
    with pytest.raises(ValueError, match="include_tests"):
        stdlib_source_files(include_tests="sometimes")


def test_pieces_cut_at_line_ends_and_join_back():
    from torchtune_longshort.data.shuffled import split_lines_into_pieces

    text = "".join(f"line {i} " + "x" * (i % 7) + "\n" for i in range(200)) + "no newline at the end"
    pieces = split_lines_into_pieces(text, 50)
    assert "".join(pieces) == text
    assert all(p.endswith("\n") for p in pieces[:-1])
    assert all(len(p) >= 50 for p in pieces[:-1])  # each ends at the first line end at or after 50 chars
    assert all(len(p) - len(p.splitlines(keepends=True)[-1]) < 50 for p in pieces)
    with pytest.raises(ValueError, match="piece_chars"):
        split_lines_into_pieces(text, 0)


def test_shuffled_stdlib_is_a_seeded_permutation_of_the_same_text():
    ordered = list(stdlib(limit=6)())
    a, b = list(stdlib(limit=6, shuffle_seed=3)()), list(stdlib(limit=6, shuffle_seed=3)())
    assert a == b and sorted(a) == sorted(ordered) and a != ordered
    pieces = stdlib(limit=6, shuffle_seed=3, piece_chars=2000)
    got = list(pieces())
    assert got == list(pieces())  # the same order on every epoch: resume stays exact
    from torchtune_longshort.data.shuffled import split_lines_into_pieces

    assert len(got) > len(ordered)
    assert sorted(got) == sorted(p for doc in ordered for p in split_lines_into_pieces(doc, 2000))
    with pytest.raises(ValueError, match="dataset.piece_chars=2000 needs dataset.shuffle_seed"):
        stdlib(limit=6, piece_chars=2000)


def test_a_bad_local_record_at_the_start_says_how_to_go_on(tmp_path):
    # refused at the start naming file and line only ("...:2: field 'text' holds int '5', expected a string")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "x = 1\n" * 50}) + "\n" + json.dumps({"text": 5}) + "\n")
    with pytest.raises(ValueError, match=r"d.jsonl:2: field 'text' holds int '5', expected a string: mend the record, "
                                         r"or skip such records with dataset.skip_bad_records=True"):
        local_text(str(data))
    assert len(list(local_text(str(data), skip_bad_records=True)())) == 2  # the skipped one keeps its place
    # bytes that do not decode name the reader's encoding, where the user can set it: a command line without an
    # encoding option is told only to mend or skip (not a "--data.encoding" it does not have)
    from torchtune_longshort.data.source_names import SourceNames, source_names

    data.write_bytes(b'{"text": "caf\xe9"}\n')
    said = ": bytes that are not utf-8 (invalid continuation byte at byte 13): mend the record, "
    with pytest.raises(ValueError) as config:
        local_text(str(data))
    assert str(config.value) == f"{data}:1{said}name the files' encoding (dataset.encoding: latin-1, cp1252, ...), " \
                                "or skip such records with dataset.skip_bad_records=True", str(config.value)
    with source_names(SourceNames("--data", {"path": "--data", "skip_bad_records": "--skip-bad-records"})):
        with pytest.raises(ValueError) as flags:
            local_text(str(data))
    assert str(flags.value) == f"{data}:1{said}or skip such records with --skip-bad-records", str(flags.value)


@pytest.mark.parametrize("where", ["dataset", "validation.dataset"])
def test_stdlib_refusals_name_the_config_key(where):
    """``min_bytes`` no file reaches and ``piece_chars`` without ``shuffle_seed`` were refused without the key
    (``no standard-library source files of >= ...``, ``piece_chars needs shuffle_seed``)."""
    from torchtune_longshort.data.source_names import SourceNames, source_names

    with source_names(SourceNames(where)):
        with pytest.raises(FileNotFoundError, match=rf"^{where}\.min_bytes=999999999: no standard-library source "
                                                    rf"files of >= 999999999 bytes .*; lower {where}\.min_bytes$"):
            stdlib(min_bytes=999_999_999)
        with pytest.raises(ValueError, match=rf"^{where}\.piece_chars=100 needs {where}\.shuffle_seed: .*set "
                                             rf"{where}\.shuffle_seed"):
            stdlib(piece_chars=100)
        with pytest.raises(ValueError, match=rf"^{where}\.piece_chars=0 is not accepted: expected an integer >= 1"):
            stdlib(piece_chars=0, shuffle_seed=1)


def test_an_evaluation_min_chars_is_not_named_as_a_config_key():
    from torchtune_longshort.eval.tasks.common.long_text import iter_texts

    with pytest.raises(FileNotFoundError) as caught:
        next(iter_texts("stdlib", min_chars=999_999_999))
    assert str(caught.value).startswith("no standard-library source files of >= 999999999 bytes"), caught.value


def test_a_resume_on_a_corpus_folder_that_lost_or_gained_a_file_is_refused(tmp_path):
    """A stream's position counts documents: resumed after a file of its folder was deleted (or one added), it read
    on from the same count into other documents, without a word (2 processes, a file deleted mid-run and the run
    resumed: steps 7-8 gave other losses than the uninterrupted run's). The saved state now holds the source's
    document count, and another count is refused, naming the section and both counts; the same data resumes."""
    folder = tmp_path / "books"
    folder.mkdir()
    for i in range(3):
        (folder / f"part{i}.jsonl").write_text("".join(json.dumps({"text": f"book {i}.{j} " * 9}) + "\n"
                                                       for j in range(4)))
    tok = lambda t: [1] + [ord(c) % 256 for c in t] + [2]  # noqa: E731
    stream = PackedTokenStream(local_text(str(folder)), tokenize=tok)
    stream.take(300)
    state = stream.state_dict()
    same = PackedTokenStream(local_text(str(folder)), tokenize=tok)
    same.load_state_dict(state)
    assert same.take(200) == stream.take(200)  # the same data: resumed where it was
    removed = (folder / "part2.jsonl").read_text()
    (folder / "part2.jsonl").unlink()  # a file deleted: 8 documents
    with pytest.raises(ValueError, match=r"^cannot resume: dataset local_text\(.*\) holds 8 documents now, the saved "
                                         rf"run read 12: its saved position \(document {state['docs_consumed']} of "
                                         r"pass 0\) would land on other documents"):
        PackedTokenStream(local_text(str(folder)), tokenize=tok).load_state_dict(state)
    (folder / "part2.jsonl").write_text(removed)
    (folder / "part3.jsonl").write_text(removed)  # a file added: 16
    with pytest.raises(ValueError, match=r"holds 16 documents now, the saved run read 12"):
        PackedTokenStream(local_text(str(folder)), tokenize=tok).load_state_dict(state)


def test_a_run_saved_when_hidden_files_were_read_is_refused_naming_the_change(tmp_path):
    """Versions before 2026-12-05 read a folder's hidden files (a Jupyter ``.ipynb_checkpoints/`` copy); this one
    leaves them out, so their saved position counts other documents: the resume was refused as 'a file added,
    deleted or emptied since', blaming the user's untouched folder. Now it names the change and the hidden file; a
    state this version saved resumes with the hidden file there."""
    folder = tmp_path / "books"
    (folder / ".ipynb_checkpoints").mkdir(parents=True)
    for i in range(3):
        (folder / f"part{i}.txt").write_text(f"book {i} " * 30)
    (folder / ".ipynb_checkpoints" / "part0-checkpoint.txt").write_text("book 0 " * 30)
    tok = lambda t: [1] + [ord(c) % 256 for c in t] + [2]  # noqa: E731
    stream = PackedTokenStream(local_text(str(folder)), tokenize=tok)
    stream.take(300)
    state = stream.state_dict()
    PackedTokenStream(local_text(str(folder)), tokenize=tok).load_state_dict(state)  # this version's: resumed
    old = {**{k: v for k, v in state.items() if k != "reading"}, "documents": 4}  # the hidden copy was read
    with pytest.raises(ValueError, match=r"^cannot resume: this run was saved by an earlier torchtune_longshort, "
                                         r"which read a folder's hidden files too \(1 here, first: .*"
                                         r"part0-checkpoint\.txt; this version leaves them out\): dataset "
                                         r"local_text\(.*would land on other text"):
        PackedTokenStream(local_text(str(folder)), tokenize=tok).load_state_dict(old)
    (folder / ".ipynb_checkpoints" / "part0-checkpoint.txt").write_text(" \n")  # no document in it: the same data
    PackedTokenStream(local_text(str(folder)), tokenize=tok).load_state_dict({**old, "documents": 3})
    (folder / ".ipynb_checkpoints" / "part0-checkpoint.txt").unlink()  # no hidden file: the count decides
    with pytest.raises(ValueError, match=r"holds 3 documents now, the saved run read 4"):
        PackedTokenStream(local_text(str(folder)), tokenize=tok).load_state_dict(old)


def test_a_resume_on_edited_text_of_the_same_document_count_is_said_naming_the_file(tmp_path, caplog):
    """A local_text corpus whose text was edited (same document count) resumed without a word, its saved position
    landing on the edited text. The data state now keeps each file's digest (size and first MiB): an edited file is
    named in one warning (not refused: torchtune and HF Trainer resume on whatever data is there, and a corrected
    corpus is a reason to go on); the same files, or the same bytes with a new mtime, say nothing, nor does a state
    saved without digests (an earlier version's)."""
    import logging
    import os

    folder = tmp_path / "texts"
    folder.mkdir()
    for i in range(3):
        (folder / f"doc{i}.txt").write_text(f"document {i} " * 40)
    tok = lambda t: [1] + [ord(c) % 256 for c in t] + [2]  # noqa: E731
    stream = PackedTokenStream(local_text(str(folder)), tokenize=tok)
    stream.take(300)
    state = stream.state_dict()

    def resumed(saved):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            PackedTokenStream(local_text(str(folder)), tokenize=tok).load_state_dict(saved)
        return [r.getMessage() for r in caplog.records if "since the run saved its data state" in r.getMessage()]

    assert resumed(state) == []
    os.utime(folder / "doc1.txt", (1, 1))  # touched: the same bytes
    assert resumed(state) == []
    (folder / "doc1.txt").write_text("DOCUMENT 1 " * 40)  # edited, its size kept
    said = resumed(state)
    assert len(said) == 1 and f"{folder / 'doc1.txt'} changed" in said[0] and "doc0" not in said[0], said
    assert resumed({k: v for k, v in state.items() if k != "digests"}) == []
