"""``hf_text(<folder>, data_files=...)``: ``datasets`` picks the builder from the files ``data_files`` names, not from
the folder, but this package asked the folder alone: ``.txt`` files named in a folder of mostly ``.jsonl`` were read
one record a line ('hello', 'world' as two documents), and ``.jsonl`` files named in a folder of mostly ``.txt`` were
refused ("JsonConfig ... doesn't have a 'sample_by' key"). The reference: ``datasets``' ``load_dataset_builder`` with
the same ``data_files``, and each file's text read whole."""

from __future__ import annotations

import json

import pytest
from datasets import load_dataset_builder

from torchtune_longshort.data.corpus import hf_text
from torchtune_longshort.data.dual_window import PackedTokenStream


def _folder(tmp_path, txt, jsonl):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for i in range(txt):
        (folder / f"book{i}.txt").write_text(f"book {i}\nits second line\n")
    for i in range(jsonl):
        (folder / f"notes{i}.jsonl").write_text(json.dumps({"text": f"note {i}"}) + "\n")
    return folder


def _builder(folder, data_files):
    return type(load_dataset_builder(str(folder), data_files=data_files)).__module__.rsplit(".", 1)[-1]


def test_text_files_named_in_a_folder_of_mostly_jsonl_are_read_whole(tmp_path):
    folder = _folder(tmp_path, txt=1, jsonl=2)
    files = [str(f) for f in sorted(folder.glob("*.txt"))]
    assert (_builder(folder, None), _builder(folder, files)) == ("json", "text")  # datasets' own choices
    assert list(hf_text(str(folder), data_files=files)()) == [open(f).read() for f in files]


def test_jsonl_files_named_in_a_folder_of_mostly_txt_are_read_as_records(tmp_path):
    folder = _folder(tmp_path, txt=2, jsonl=1)
    files = [str(f) for f in sorted(folder.glob("*.jsonl"))]
    assert (_builder(folder, None), _builder(folder, files)) == ("text", "json")
    assert list(hf_text(str(folder), data_files=files)()) == [json.loads(open(f).read())["text"] for f in files]


def test_a_run_that_read_the_named_text_files_by_lines_is_refused(tmp_path):
    folder = _folder(tmp_path, txt=1, jsonl=2)
    files = [str(f) for f in sorted(folder.glob("*.txt"))]
    stream = PackedTokenStream(hf_text(str(folder), data_files=files), tokenize=lambda t: [1, 2, 3])
    stream.take(2)
    state = {**stream.state_dict(), "reading": 4}  # saved by the version that read them by lines
    with pytest.raises(ValueError, match=r"which read text files one record a line"):
        PackedTokenStream(hf_text(str(folder), data_files=files), tokenize=lambda t: [1]).load_state_dict(state)
