"""A resume refused for dataset.path (a local_text folder whose files are not the run's) said how to resume twice:
'... (...; to resume, put the run's data back at 'data'). Resume with the saved values (the recipe state's 'config'),
or start a new run in another output_dir' (walked: tune run on the tiny config, stopped at step_2, resumed with
dataset.path=data3). Each refused key is now told its fix once: the saved values only for keys whose refusal says
no other way."""

from __future__ import annotations

import re

import pytest

from torchtune_longshort.training.resume import compare_resume_config

NOTE = " (its files are not those the run read: ...; to resume, put the run's data back at 'data')"
SAVED = {"seq_len": 256, "dataset": {"_component_": "torchtune_longshort.data.corpus.local_text", "path": "data"}}


def _refusal(new: dict) -> str:
    with pytest.raises(ValueError) as e:
        compare_resume_config(SAVED, new, notes={"dataset.path": NOTE})
    return str(e.value)


def _fixes(line: str) -> list:
    """The ways on the line offers, in order: each 'to resume, ...' / 'Resume with ...' and 'start a new run'."""
    return re.findall(r"to resume, put the run's data back|Resume with the saved [\w, .]+? \(|start a new run", line)


def test_a_moved_data_refusal_says_how_to_resume_once():
    line = _refusal({**SAVED, "dataset": {**SAVED["dataset"], "path": "data3"}})
    assert "dataset.path: 'data' -> 'data3'" + NOTE in line
    assert _fixes(line) == ["to resume, put the run's data back", "start a new run"], line


def test_the_saved_values_are_named_for_the_keys_without_a_way_of_their_own():
    line = _refusal({**SAVED, "seq_len": 128, "dataset": {**SAVED["dataset"], "path": "data3"}})
    assert _fixes(line) == ["to resume, put the run's data back", "Resume with the saved value of seq_len (",
                            "start a new run"], line
    line = _refusal({**SAVED, "seq_len": 128})  # no note: the saved values, as before
    assert line.endswith("seq_len: 256 -> 128. Resume with the saved values (the recipe state's 'config'), or start a "
                         "new run in another output_dir"), line
