"""``+key=value`` (Hydra's syntax to add a key) on torchtune's command line: torchtune 0.6.1 has no ``+`` (its
``key=value`` sets a key or adds it), so OmegaConf kept a top-level node ``+loss`` that nothing reads. The config
check refused ``+loss.alhpa=0.2`` as "unknown config key(s) at the top level: '+loss' (did you mean 'loss'?)",
naming neither the misspelt key nor why; a correctly spelt ``+loss.alpha=0.2`` got the same words."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from torchtune.config._utils import _merge_yaml_and_cli_args

from torchtune_longshort.training.recipe_config import load_recipe_config

BASE = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs/tiny/longshort_stdlib.yaml"))
PLUS = ("torchtune's command line takes no '+' (Hydra's prefix to add a key; here key=value sets a key or adds it, "
        "and '+key' made a node nothing reads)")


def _refusal(overrides):
    with pytest.raises(KeyError) as e:  # torchtune's parser is the reference for what the command line makes
        load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), overrides), local=False)
    return str(e.value)


def test_a_plus_override_is_refused_as_its_key_without_the_plus_and_says_so():
    plain = _refusal(["loss.alhpa=0.2"])  # the check's own line for the misspelt key, as torchtune adds it
    assert "'loss.alhpa' (did you mean 'alpha'?)" in plain
    assert _refusal(["+loss.alhpa=0.2"]) == f"{plain} ('+loss.alhpa': {PLUS}: give loss.alhpa=...)"
    assert _refusal(["+loss.alpha=0.2", "+max_steps=3"]) == (
        f"'+loss.alpha', '+max_steps': {PLUS}: give loss.alpha=..., max_steps=...")
    config = load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), ["loss.alpha=0.2"]), local=False)
    assert config.loss.alpha == 0.2  # without the '+': taken


def test_a_plus_override_of_a_refused_value_says_both_in_one_round():
    # +loss.alpha=-1 said only 'loss.alpha=-1 must be ...'; the '+' refusal came on the next try
    with pytest.raises(ValueError) as plain:  # the reference: the check's own line without the '+'
        load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), ["loss.alpha=-1"]), local=False)
    with pytest.raises(ValueError) as e:
        load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), ["+loss.alpha=-1"]), local=False)
    assert "loss.alpha=-1" in str(plain.value)
    assert str(e.value) == f"{plain.value} ('+loss.alpha': {PLUS}: give loss.alpha=...)"
