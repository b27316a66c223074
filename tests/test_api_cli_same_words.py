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
from torchtune_longshort.windows import resolve_e_range, resolve_min_context

BASE = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs/tiny/longshort_stdlib.yaml"))


@pytest.mark.parametrize("key,value", [("divergence", "sc"), ("divergence", "torch.nn"), ("min_context", 0),
                                       ("min_context", "abc"), ("alpha", -1), ("alpha", "abc"), ("alpha", True),
                                       ("alpha", -0.5), ("num_chunks", 0), ("num_chunks", 1.5),
                                       ("num_chunks", "abc"), ("num_chunks", True)])
def test_the_config_check_says_the_librarys_words_once(key, value):
    """alpha and num_chunks were worded otherwise by each ('alpha=-1 must be a finite number >= 0' from Python,
    'loss.alpha=-1 is not accepted: expected a finite number >= 0' from the config check), and LongShortLoss took
    num_chunks=True, which the config check refused; one validator now says both."""
    with pytest.raises(ValueError) as api:
        LongShortLoss(**{key: value})
    with pytest.raises(ValueError) as cli:
        load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), [f"loss.{key}={value}"]), local=False)
    assert str(cli.value) == f"loss.{api.value}", (str(cli.value), str(api.value))
    assert str(cli.value).count(f"{key}={value!r}") == 1 and "\n" not in str(cli.value)


def _config_refusal(override: str) -> str:
    with pytest.raises(ValueError) as cli:
        load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), [override]), local=False)
    assert "\n" not in str(cli.value)
    return str(cli.value)


@pytest.mark.parametrize("override,library", [
    ("e_range=[0,300]", lambda: resolve_e_range([0, 300], 256)),
    ("e_range=[5,2]", lambda: resolve_e_range([5, 2], 256)),
    ("loss.min_context=300", lambda: resolve_min_context(300, 256))])
def test_a_value_judged_at_seq_len_is_named_once(override, library):
    """longshort-validate tiny/longshort_stdlib.yaml e_range=[0,300] said 'e_range=[0, 300] is not accepted at
    seq_len=256: e_range=[0, 300] resolves to [0, 300] for L=256: ...' (loss.min_context=300: '... at seq_len=256:
    min_context=300 must be in [1, L=256]'); the line is now the library's (the reference: its exception at
    L = the config's seq_len 256), with the field's path."""
    with pytest.raises(ValueError) as api:
        library()
    path = override.split("=", 1)[0]
    assert _config_refusal(override) == f"{path.rsplit('.', 1)[0] + '.' if '.' in path else ''}{api.value}"


def test_a_bound_the_library_names_alone_keeps_the_fields_value_and_seq_len():
    said = _config_refusal("e_range=[x,1]")
    assert said.startswith("e_range=['x', 1] is not accepted at seq_len=256: e_range bound 'x' is not understood")


def test_checkpointer_model_type_is_named_once():
    """'checkpointer.model_type: model_type='MISTRAL' does not convert ...' named the key twice."""
    said = _config_refusal("checkpointer.model_type=MISTRAL")
    assert said.startswith("checkpointer.model_type='MISTRAL' does not convert a 'llama' checkpoint"), said
    assert said.count("'MISTRAL'") == 1
