"""hf_text leaves empty and whitespace-only records out, as local_text does (each was a document of a BOS / EOS pair
alone); a data state saved before (reading mark < 3) whose position counted such records is refused naming the
change."""

import json

import pytest

from torchtune_longshort.data import corpus
from torchtune_longshort.data.dual_window import PackedTokenStream
from torchtune_longshort.data.source_names import SourceNames, source_names

TEXTS = ["", "   ", "first book", "\n\t", "second book", "third book"]


def _jsonl(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    return str(path)


def _tok(text):
    return [1] + [ord(c) % 256 for c in text] + [2]


def test_hf_text_yields_the_documents_local_text_yields(tmp_path):
    path = _jsonl(tmp_path)
    want = [t for t in TEXTS if t.strip()]  # the reference: the records that hold text
    assert list(corpus.local_text(path)()) == want
    assert list(corpus.hf_text("json", data_files=path)()) == want
    assert list(corpus.hf_text("json", data_files=path, streaming=False)()) == want


def test_a_state_saved_counting_empty_records_is_refused_where_they_precede_its_position(tmp_path):
    path = _jsonl(tmp_path)
    stream = PackedTokenStream(corpus.hf_text("json", data_files=path), tokenize=_tok)
    stream.take(15)  # into the second document
    state = stream.state_dict()
    assert state["reading"] >= 3 and state["docs_consumed"] == 2
    again = PackedTokenStream(corpus.hf_text("json", data_files=path), tokenize=_tok)
    again.load_state_dict(state)  # this version's: resumed
    assert again.take(20) == stream.take(20)
    # an earlier version at document 2 had read '' and '   ': its position lands on 'first book', not 'third book'
    old = {**state, "reading": 2}
    with pytest.raises(ValueError, match=r"^cannot resume: this run was saved by an earlier torchtune_longshort, "
                                         r"which counted empty and whitespace-only records as documents \(2 before "
                                         r"the saved position, first: record 0; this version leaves them out\): "
                                         r"dataset hf_text\('json'.*\(document 2 of pass 0\) would land on other text"):
        PackedTokenStream(corpus.hf_text("json", data_files=path), tokenize=_tok).load_state_dict(old)
    # a position before any empty record (none among the first 0) lands where it did: resumed
    PackedTokenStream(corpus.hf_text("json", data_files=path), tokenize=_tok).load_state_dict(
        {**old, "docs_consumed": 0, "buffer": []})


def test_a_state_of_mark_2_is_not_told_of_the_changes_of_mark_2(tmp_path):
    """The by-line reading of ``.txt`` files ended at mark 2: a state saved with mark 2 read them whole, as now."""
    (tmp_path / "books").mkdir()
    for i in range(3):
        (tmp_path / "books" / f"b{i}.txt").write_text(f"book {i}\n" * 5)
    stream = PackedTokenStream(corpus.hf_text(str(tmp_path / "books")), tokenize=_tok)
    stream.take(60)
    state = {**stream.state_dict(), "reading": 2}
    again = PackedTokenStream(corpus.hf_text(str(tmp_path / "books")), tokenize=_tok)
    again.load_state_dict(state)
    assert again.take(20) == stream.take(20)
    with pytest.raises(ValueError, match=r"which read text files one record a line"):
        PackedTokenStream(corpus.hf_text(str(tmp_path / "books")), tokenize=_tok).load_state_dict(
            {k: v for k, v in state.items() if k != "reading"})


@pytest.mark.parametrize("streaming", [True, False])
def test_a_source_of_blank_records_alone_is_refused_as_blank_not_empty(tmp_path, streaming):
    """Its records exist, each blank: 'split 'train' is empty' named neither them, the field nor the fix."""
    path = tmp_path / "z.jsonl"
    path.write_text('{"text": ""}\n{"text": "  "}\n{"text": "\\n\\t"}\n')
    with pytest.raises(ValueError) as refused:
        corpus.hf_text("json", data_files=str(path), streaming=streaming)
    assert str(refused.value) == (
        "dataset 'json' split 'train' yields no non-empty documents: its 3 records are all blank "
        "(dataset.text_field='text' is empty or whitespace-only in each): name data that holds text, or the field "
        "that holds it (dataset.text_field)")
    if streaming:  # an evaluation's source is led by the user's key for it, as its torn line: it started "data set"
        names = SourceNames("data set", {"text_field": "ppl_text_field"}, key="ppl_dataset_path in --metadata")
        with source_names(names), pytest.raises(ValueError, match="^ppl_dataset_path in --metadata: data set 'json' "
                                                                  "split 'train' yields no non-empty documents: "):
            corpus.hf_text("json", data_files=str(path), streaming=streaming)


def test_a_source_with_no_record_is_still_empty_not_blank(tmp_path):
    """A JSON Lines file of blank lines streams no record at all (datasets' own reading, the reference): it is
    empty, not 'its 0 record(s) are all blank': its file is named as holding no records."""
    import datasets

    path = tmp_path / "n.jsonl"
    path.write_text("\n\n")
    assert list(datasets.load_dataset("json", data_files=str(path), split="train", streaming=True)) == []
    with pytest.raises(ValueError) as refused:
        corpus.hf_text("json", data_files=str(path), streaming=True)
    assert str(refused.value) == f"dataset.data_files: {path} holds no records (an empty file); name a file with data"


@pytest.mark.parametrize("content", ["\n\n", "[]"])
def test_a_streamed_empty_file_is_said_as_a_loaded_one_is(tmp_path, content):
    """A JSON file of blank lines (or an empty list) streamed (hf_text's default) was refused "dataset
    'json' split 'train' is empty", where streaming=False names the file and the way on: the reference."""
    path = tmp_path / "b.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError) as loaded:
        corpus.hf_text("json", data_files=str(path), streaming=False)
    with pytest.raises(ValueError) as streamed:
        corpus.hf_text("json", data_files=str(path))
    assert str(streamed.value) == str(loaded.value) == (
        f"dataset.data_files: {path} holds no records (an empty file); name a file with data")


def test_a_state_before_both_marks_is_told_of_both_changes(tmp_path):
    """A state without a reading mark (1) over a folder of .txt files whose first is empty: the reading of mark 2 (text
    files one record a line) and of mark 3 (the empty file a document) each changed what its position lands on; the
    refusal names both, joined."""
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a0.txt").write_text("")
    for i in range(1, 3):
        (tmp_path / "books" / f"b{i}.txt").write_text(f"book {i}\n" * 5)
    stream = PackedTokenStream(corpus.hf_text(str(tmp_path / "books")), tokenize=_tok)
    stream.take(60)
    state = {k: v for k, v in stream.state_dict().items() if k != "reading"}
    with pytest.raises(ValueError) as refused:
        PackedTokenStream(corpus.hf_text(str(tmp_path / "books")), tokenize=_tok).load_state_dict(state)
    said = str(refused.value)
    assert "which read text files one record a line" in said, said
    assert "; and counted empty and whitespace-only records as documents" in said, said


def test_a_state_saved_without_a_document_count_is_resumed(tmp_path):
    """A data state without 'documents' (saved before the count was kept) is not refused for a count it lacks: the
    stream resumes on the text the saving stream goes on with (the reference). local_text counts its
    documents (hf_text does not)."""
    path = _jsonl(tmp_path)
    stream = PackedTokenStream(corpus.local_text(path), tokenize=_tok)
    stream.take(15)
    state = stream.state_dict()
    assert state.pop("documents") == len([t for t in TEXTS if t.strip()])
    again = PackedTokenStream(corpus.local_text(path), tokenize=_tok)
    again.load_state_dict(state)
    assert again.take(20) == stream.take(20)
