"""A local_text file edited since a run's save, resumed at document 1 of pass 0, was said as 'its saved position
(document 1 of pass 0) would land on the edited text' wherever the edit was: doc0 (read before the position, so the
pass's documents still to come are unchanged) alike. The warning now says what the edit affects; the reference is the
resumed stream itself: whether the edited text comes before its pass 0 ends."""

import logging

import pytest

from torchtune_longshort.data.corpus import local_text
from torchtune_longshort.data.dual_window import PackedTokenStream

MARK = "EDITED "


def _tok(text):
    return [1] + [ord(c) % 256 for c in text] + [2]


def _stream(folder, seed):
    return PackedTokenStream(local_text(str(folder)), tokenize=_tok, shuffle_seed=seed)


def _resumed(folder, state, seed, caplog):
    """(the warning said, whether the resumed stream reads the edited text before its pass ends)"""
    caplog.clear()
    stream = _stream(folder, seed)
    with caplog.at_level(logging.WARNING):
        stream.load_state_dict(state)
    said = [r.getMessage() for r in caplog.records if "since the run saved its data state" in r.getMessage()]
    assert len(said) == 1, said
    tokens = []
    while True:
        token = stream.take(1)
        if stream.epoch != state["epoch"]:
            break
        tokens += token
    return said[0], ",".join(map(str, _tok(MARK)[1:-1])) in ",".join(map(str, tokens))


@pytest.mark.parametrize("seed", [None, 3])
def test_the_warning_says_whether_the_edit_is_still_to_come_in_the_pass(tmp_path, caplog, seed):
    folder = tmp_path / "texts"
    folder.mkdir()
    texts = {f"doc{i}.txt": f"document {i} " * 40 for i in range(4)}
    for name, text in texts.items():
        (folder / name).write_text(text)
    stream = _stream(folder, seed)
    stream.take(300)  # into the pass's first document
    state = stream.state_dict()
    assert (state["epoch"], state["docs_consumed"]) == (0, 1)
    seen = set()
    for name in texts:
        (folder / name).write_text(MARK * 40)
        said, read_in_this_pass = _resumed(folder, state, seed, caplog)
        seen.add(read_in_this_pass)
        (folder / name).write_text(texts[name])
        assert f"{folder / name} changed since" in said and "would land on" not in said, said
        if read_in_this_pass:
            assert "its saved position (document 1 of pass 0) comes before it: the resumed run reads the edited " \
                "text in this pass" in said, said
        else:
            assert "its saved position (document 1 of pass 0) is past it: pass 0 read it before" in said and \
                "the documents still to come in pass 0 are unchanged, and the run reads the edited text from " \
                "pass 1 on" in said, said
    assert seen == {True, False}  # one document read before the position, three still to come
