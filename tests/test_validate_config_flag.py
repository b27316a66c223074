"""``longshort-validate --config X``: tune run's spelling, given to the check. Before, argparse's "unrecognized
arguments: --config". torchtune's own ``tune validate <config>`` takes the config as its first argument and refuses
``--config`` (its parser is the reference here); so does longshort-validate, in one line that gives the command as it
should be, before anything is read or written."""

from __future__ import annotations

import pytest

from torchtune_longshort.training.recipe_config.validate import main


def test_tune_validate_itself_takes_the_config_first_and_refuses_the_flag():
    import argparse

    from torchtune._cli.validate import Validate

    parser = argparse.ArgumentParser(prog="tune")
    Validate(parser.add_subparsers())
    assert str(parser.parse_args(["validate", "run.yaml"]).config) == "run.yaml"
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["validate", "--config", "run.yaml"])
    assert e.value.code == 2


@pytest.mark.parametrize("argv, fixed", [
    (["--config", "tiny/longshort_stdlib.yaml"], "tiny/longshort_stdlib.yaml"),
    (["--config=tiny/longshort_stdlib.yaml", "max_steps=3", "--nproc_per_node", "2"],
     "tiny/longshort_stdlib.yaml max_steps=3 --nproc_per_node 2"),
    (["max_steps=3", "--config", "run.yaml"], "run.yaml max_steps=3"),
])
def test_the_config_flag_is_refused_naming_the_first_argument(argv, fixed, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the shipped config trains its tokenizer under ./outputs when checked
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("longshort-validate: error: --config: the config is the first argument"), err
    assert err.rstrip("\n").endswith(f": longshort-validate {fixed}"), err
    assert list(tmp_path.iterdir()) == []
