"""Switching the tiny config's dataset component on the command line keeps the old component's keys
(``dataset.include_tests`` of corpus.stdlib under corpus.hf_text): hf_text hands a key it does not name to
``datasets.load_dataset``, whose json builder raised ``TypeError: JsonConfig.__init__() got an unexpected keyword
argument 'include_tests'`` once the model had loaded. The config check now refuses it in one line naming the key and
its fix; a key the builder does take (``encoding``) still passes. ``datasets`` itself is the reference."""

from __future__ import annotations

import json

import pytest

SWITCH = ["dataset._component_=torchtune_longshort.data.corpus.hf_text", "dataset.source=json"]


def _validate(args, capsys):
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    with pytest.raises(SystemExit) as exit_info:
        validate_main(args)
    return exit_info.value.code, capsys.readouterr().err


def test_a_key_kept_from_the_earlier_component_is_refused_before_anything(tmp_path, capsys):
    import datasets

    data = tmp_path / "z.jsonl"
    data.write_text(json.dumps({"text": "hello world " * 20}) + "\n")
    with pytest.raises(TypeError, match="include_tests"):  # the reference: what datasets says of the key
        datasets.load_dataset("json", data_files=str(data), split="train", streaming=True, include_tests=False)
    datasets.load_dataset("json", data_files=str(data), split="train", streaming=True, encoding="utf-8")
    out = tmp_path / "out"
    base = ["tiny/longshort_stdlib.yaml", *SWITCH, f"dataset.data_files={data}", f"output_dir={out}"]
    code, err = _validate(base, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.strip() == (
        "longshort-validate: error: dataset.include_tests is not an argument of torchtune_longshort.data.corpus."
        "hf_text, nor of datasets' load_dataset or its 'json' builder (JsonConfig), to which it hands other keys (an "
        "argument of corpus.stdlib: kept from an earlier dataset._component_?): remove it ('~dataset.include_tests' "
        "on the command line)"), err
    assert not out.exists()
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    assert validate_main([*base, "~dataset.include_tests", "dataset.encoding=utf-8"]) == 0
    assert not out.exists()
