"""A library refusal the recipe's config check passes on (loss.divergence, loss.min_context: config.values.wrapped)
named the field's value twice: "loss.divergence='sc' is not accepted: divergence='sc' is not known; ...". The
command line's line is now the Python API's own message (the reference: the exception the library raises), the
field named by its path, once."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from torchtune.config._utils import _merge_yaml_and_cli_args

from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.training.recipe_config import load_recipe_config

BASE = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs/tiny/longshort_stdlib.yaml"))


@pytest.mark.parametrize("key,value", [("divergence", "sc"), ("divergence", "torch.nn"), ("min_context", 0),
                                       ("min_context", "abc")])
def test_the_config_check_says_the_librarys_words_once(key, value):
    with pytest.raises(ValueError) as api:
        LongShortLoss(**{key: value})
    with pytest.raises(ValueError) as cli:
        load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), [f"loss.{key}={value}"]), local=False)
    assert str(cli.value) == f"loss.{api.value}", (str(cli.value), str(api.value))
    assert str(cli.value).count(f"{key}={value!r}") == 1 and "\n" not in str(cli.value)
