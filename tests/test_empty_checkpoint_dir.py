"""``checkpoint_dir=`` (empty, or null) on a shipped real-model config was refused as ``tokenizer.path=None is not
accepted: expected a string ...``, leading with a key the user never wrote (the config's ``tokenizer.path:
${checkpoint_dir}``); it now leads with checkpoint_dir, saying it is empty and what to give (the converted folder, and
how to make one)."""

from argparse import Namespace

import pytest
from torchtune.config._utils import _merge_yaml_and_cli_args

from torchtune_longshort.models.gguf import PYPI_MODELS


@pytest.mark.parametrize("given", ["checkpoint_dir=", "checkpoint_dir=null"])
def test_an_empty_checkpoint_dir_is_refused_naming_it(given, tmp_path, capsys, monkeypatch):
    from torchtune_longshort.training.recipe_config.validate import main

    # the reference: torchtune's own command-line parser makes the key None (not '', which the field refuses itself)
    assert _merge_yaml_and_cli_args(Namespace(checkpoint_dir="/x"), [given]).checkpoint_dir is None
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:
        main(["smollm2_135m/lora_yarn_16k_stdlib.yaml", given])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("longshort-validate: error: checkpoint_dir is empty (tokenizer.path is '${checkpoint_dir}' "
                          "in the config and was checked first): set checkpoint_dir to the start checkpoint's folder"), err
    assert "python -m torchtune_longshort.models.gguf --model smollm2-135m-instruct" in err, err
    assert "smollm2-135m-instruct" in PYPI_MODELS  # the command it gives names a model the converter has
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_quoted_empty_checkpoint_dir_gets_the_same_hint(tmp_path, capsys, monkeypatch):
    # `longshort-validate lora.yaml "checkpoint_dir=''"` said only "expected a non-empty string"; the reference:
    # torchtune's parser makes it '' (the field's own refusal), and the unquoted form's hint (the test above)
    from torchtune_longshort.training.recipe_config.validate import main

    assert _merge_yaml_and_cli_args(Namespace(checkpoint_dir="/x"), ["checkpoint_dir=''"]).checkpoint_dir == ""
    monkeypatch.chdir(tmp_path)
    hints = []
    for given in ("checkpoint_dir=", "checkpoint_dir=''"):
        with pytest.raises(SystemExit) as refused:
            main(["smollm2_135m/lora_yarn_16k_stdlib.yaml", given])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and err.count("\n") == 1, err
        hints.append(err.split(": set checkpoint_dir to ", 1)[-1])
    assert err.startswith("longshort-validate: error: checkpoint_dir='' is empty: set checkpoint_dir to "), err
    assert hints[0] == hints[1], hints
    assert list(tmp_path.iterdir()) == []
