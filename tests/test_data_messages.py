"""The data refusals name the fix (before: 'dataset.path=... yields no non-empty documents (1 file(s) read)', and a
resume's 'the corpus has only 2 documents but the saved state consumed 5 in epoch 0; was the data source changed?',
'... with shuffle_seed=3, this stream with None'). Each message is matched whole, on one line."""

from __future__ import annotations

import re

import pytest

from torchtune_longshort.data import PackedTokenStream
from torchtune_longshort.data.corpus import local_text

RESUME_FIX = r": restore the data the run read, or start a new run in another output_dir"


def _files(tmp_path, texts):
    for i, text in enumerate(texts):
        (tmp_path / f"{i}.txt").write_text(text)
    return str(tmp_path)


def _resumed(documents, shuffle_seed=None, saved_seed=None, consumed=5):
    stream = PackedTokenStream(documents, tokenize=lambda t: [1, 2, 3], shuffle_seed=shuffle_seed)
    stream.load_state_dict({"epoch": 0, "docs_consumed": consumed, "tokens_consumed": 0, "buffer": [],
                            "shuffle_seed": saved_seed})
    stream.take(1)


CASES = {
    "empty files": (lambda t: local_text(_files(t, ["", " \n"])),
                    r"dataset.path='.*' yields no non-empty documents \(2 files read\): name files that hold text"),
    "resume past a stream's end": (lambda t: _resumed(lambda: iter(["a", "b"])),
                                   r"cannot resume: the corpus has only 2 documents but the saved state consumed 5 in "
                                   r"epoch 0" + RESUME_FIX),
    "resume past the files": (lambda t: _resumed(local_text(_files(t, ["a", "b"]))),
                              r"cannot resume: the corpus has only 2 documents but the saved state consumed 5 in "
                              r"epoch 0" + RESUME_FIX),
    "resume past the shuffled files": (lambda t: _resumed(local_text(_files(t, ["a", "b"])), 0, 0),
                                       r"cannot resume: the corpus has only 2 documents but the saved state consumed "
                                       r"5 in epoch 0" + RESUME_FIX),
    "resume with another shuffle": (lambda t: _resumed(local_text(_files(t, ["a", "b"])), None, 3, 1),
                                    r"cannot resume: the saved data state read documents with shuffle_seed=3, this "
                                    r"stream with None: resume with the seed the run was saved with \(data_seed, else "
                                    r"seed\), or start a new run in another output_dir"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_data_refusal_names_the_fix(tmp_path, case):
    call, pattern = CASES[case]
    with pytest.raises(ValueError) as info:
        call(tmp_path)
    assert re.fullmatch(pattern, str(info.value)), str(info.value)
