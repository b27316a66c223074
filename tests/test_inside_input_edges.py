"""Hand mutants of config/inside_input survived the four tests of the commands that ask it (mutants16): an output
reached through a symbolic link to an input folder, or named under '~', let through (its links not followed, '~' not
expanded: the run wrote among the model's files); an output equal to an input file refused as a folder would be (the
file check of the option names it); and a folder holding config.json without weights (an output of one's own, a
results folder) taken for a model's, refusing good input, or one holding only pytorch_model.bin weights let through.
The references: os.path.samefile and os.path.expanduser on the same paths, os.path.isfile, and transformers' own
weight file names."""

from __future__ import annotations

import os

import pytest

from torchtune_longshort.config.inside_input import model_folder_at, refuse_inside_input


def _refused(value, inputs):
    try:
        refuse_inside_input("--out", value, inputs, "the rows")
    except ValueError as e:
        return str(e)
    return None


def test_an_output_through_a_link_to_an_input_is_refused(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    os.symlink(model, tmp_path / "link")
    assert os.path.samefile(tmp_path / "link", model)  # the reference: the same folder
    said = _refused(str(tmp_path / "link"), [("the model folder", str(model))])
    assert said and " is the model folder " in said, said
    said = _refused(str(tmp_path / "link" / "sub"), [("the model folder", str(model))])
    assert said and " lies inside the model folder " in said, said


def test_an_output_under_home_is_refused_where_home_holds_the_input(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "model").mkdir()
    assert os.path.expanduser("~/model") == str(tmp_path / "model")
    said = _refused("~/model/out", [("--tokenizer", str(tmp_path / "model"))])
    assert said and "lies inside --tokenizer=" in said, said


def test_an_output_equal_to_an_input_file_is_left_to_the_file_check(tmp_path):
    f = tmp_path / "tokenizer.json"
    f.write_text("{}")
    assert os.path.isfile(f)
    assert _refused(str(f), [("--tokenizer", str(f))]) is None


@pytest.mark.parametrize("weights", [None, "model.safetensors", "pytorch_model.bin", "pytorch_model-00001-of-00002.bin",
                                     "model.safetensors.index.json"])
def test_a_model_folder_is_config_json_beside_weights(tmp_path, weights):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    if weights:
        (folder / weights).write_text("")
    (folder / "sub").mkdir()
    expected = folder if weights else None  # transformers loads a model from config.json and one of these
    assert model_folder_at(folder / "sub") == expected
