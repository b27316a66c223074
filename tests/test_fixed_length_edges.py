"""A validation set's edges (``fixed_length_sequences``): the source is read once, never cycled (a short source
refused with how many whole sequences it holds, counted from the tokenizer's own encode of the text), and the
documented bounds ``seq_len >= 2`` and ``num_sequences >= 1`` refused at their boundary."""

from __future__ import annotations

import pytest

from torchtune_longshort.data.corpus import local_text
from torchtune_longshort.data.fixed_length import TooFewSequences, fixed_length_sequences


def _tok(text):
    return [1] + list(text.encode("utf-8")) + [2]  # BOS + bytes + EOS: the stream packs what this returns


def _source(tmp_path, texts):
    for i, text in enumerate(texts):
        (tmp_path / f"{i}.txt").write_text(text)
    return local_text(str(tmp_path))


def test_a_short_source_is_read_once_and_its_whole_sequences_counted(tmp_path):
    texts = ["alpha beta gamma " * 3, "delta epsilon " * 4]
    total = sum(len(_tok(t)) for t in texts)  # the reference: the tokenizer's own encode of each document
    seq_len = 16
    whole = total // seq_len
    assert whole >= 2 and total % seq_len  # a partial last sequence, which is not given
    got = fixed_length_sequences(_source(tmp_path, texts), _tok, seq_len, whole)
    assert got.flatten().tolist() == [t for text in texts for t in _tok(text)][:whole * seq_len]
    with pytest.raises(TooFewSequences, match=rf"holds only {whole} sequences of {seq_len} tokens; {whole + 1} were "
                                              r"asked for"):
        fixed_length_sequences(_source(tmp_path, texts), _tok, seq_len, whole + 1)  # cycling would give it


@pytest.mark.parametrize("seq_len,num_sequences", [(1, 1), (2, 0)])
def test_the_documented_bounds_are_refused_at_their_edge(tmp_path, seq_len, num_sequences):
    source = _source(tmp_path, ["some text " * 10])
    with pytest.raises(ValueError, match=r"seq_len=.* must be an int >= 2 and num_sequences=.* >= 1"):
        fixed_length_sequences(source, _tok, seq_len, num_sequences)
    assert fixed_length_sequences(source, _tok, 2, 1).shape == (1, 2)  # the bounds themselves are taken
