"""torch's words on a file it cannot load, as a refusal quotes them (``state_words.said``: the first sentence), were
cut at 200 characters without saying so; torch's mmap refusal of a file given as a string names it
(``torch.save(<path>, _use_new_zipfile_serialization=True), please torch.save ...``), so under a long folder the words
ended mid-path. The first sentence is now kept whole, as a tokenizer library's words are (one cap,
``refusals.capped``: only over 1000 characters cut, saying so)."""

import pytest
import torch

from torchtune_longshort.refusals import LIBRARY_WORDS_CAP
from torchtune_longshort.training.state_words import said


def test_torch_words_naming_a_long_path_are_kept_whole(tmp_path):
    folder = tmp_path.joinpath(*["runs_kept_from_the_long_context_study_of_last_week"] * 3)
    folder.mkdir(parents=True)
    state = folder / "step_2.pt"
    state.write_text("notes, not a recipe state\n" * 8)  # another file put in its place
    with pytest.raises(RuntimeError) as torch_error:  # the reference: torch's own words on that file
        torch.load(str(state), map_location="cpu", weights_only=False, mmap=True)
    words = str(torch_error.value)
    assert len(words) > 200 and str(state) in words and ". " not in words, words  # one sentence, over the old cut
    assert said(torch_error.value) == words


def test_only_a_huge_message_is_cut_saying_so():
    line = said(RuntimeError("x" * 5000 + ". advice"))
    assert line == "x" * LIBRARY_WORDS_CAP + " ... (cut here: 5000 characters in all)"
