"""An optimizer argument torch refuses (``longshort-validate tiny/longshort_stdlib.yaml optimizer.weight_decay=-1``)
was said in torch's words after every argument, naming the value twice ('optimizer (lr=0.003, weight_decay=-1,
fused=False): Invalid weight_decay value: -1'), or naming no field at all of a value of another kind ("'<=' not
supported between instances of 'float' and 'str'"); the config check now names the field, the value once and what
torch accepts of it. The reference: torch.optim's own checks, which refuse each value and take the bound."""

from __future__ import annotations

import pytest
import torch

from torchtune_longshort.config.fields import build_section
from torchtune_longshort.training.recipe_config.components import OptimizerConfig

NUMBER, PAIR = "a number >= 0", "a pair [beta1, beta2], each in [0, 1)"
# (optimizer, key, refused values, a value at the bound torch takes, the accepted words)
CASES = [("AdamW", "weight_decay", [-1, -1e-9, "abc"], 0.0, NUMBER), ("AdamW", "eps", [-1, "abc"], 0.0, NUMBER),
         ("Adam", "betas", [[2, 0.9], [0.9, 1.0], [-0.1, 0.9], [0.9, "abc"]], [0.0, 0.0], PAIR),
         ("SGD", "momentum", [-1, "abc"], 0.0, NUMBER), ("SGD", "weight_decay", [-0.5], 0.0, NUMBER)]


def _check(name, **args):
    return build_section(OptimizerConfig, {"_component_": f"torch.optim.{name}", "lr": 1e-3, **args}, "optimizer")


def _torch_refuses(name, **args) -> bool:
    try:
        getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(1))], lr=1e-3, **args)
    except (ValueError, TypeError):
        return True
    return False


@pytest.mark.parametrize("name,key,refused,bound,accepted", CASES)
def test_a_refused_argument_is_named_with_its_value_once(name, key, refused, bound, accepted):
    assert not _torch_refuses(name, **{key: bound})  # the words' bound is torch's
    _check(name, **{key: bound})
    for value in refused:
        assert _torch_refuses(name, **{key: value})
        with pytest.raises(ValueError) as e:
            _check(name, **{key: value})
        assert str(e.value) == f"optimizer.{key}={value!r} is not accepted: expected {accepted}"


def test_a_refusal_of_two_arguments_together_names_the_one_without_which_it_builds():
    assert _torch_refuses("SGD", nesterov=True)  # torch: a momentum and zero dampening
    with pytest.raises(ValueError, match=r"^optimizer.nesterov=True is not accepted by torch.optim.SGD: Nesterov "
                                         r"momentum requires a momentum and zero dampening$"):
        _check("SGD", nesterov=True)
    _check("SGD", nesterov=True, momentum=0.9)


@pytest.mark.parametrize("name,args", [
    ("AdamW", {"weight_decay": -1, "eps": -1}),
    ("Adam", {"betas": [2, 0.9], "eps": "abc", "weight_decay": -1}),
    ("SGD", {"nesterov": True, "weight_decay": -1}),
])
def test_several_refused_arguments_are_each_named_in_one_line(name, args):
    """``optimizer.weight_decay=-1 optimizer.eps=-1`` was said in torch's words after every argument ('optimizer
    (lr=..., weight_decay=-1, fused=False, eps=-1): Invalid epsilon value: -1'); each argument torch refuses on its
    own (the reference) is now named, in the config's order, in one line."""
    assert _torch_refuses(name, **args) and all(_torch_refuses(name, **{k: v}) for k, v in args.items())
    with pytest.raises(ValueError) as e:
        _check(name, **args)
    words = [str(_one_refusal(name, k, v)) for k, v in args.items()]
    assert str(e.value) == "; ".join(words) and "\n" not in str(e.value)


def _one_refusal(name, key, value):
    with pytest.raises(ValueError) as e:
        _check(name, **{key: value})
    return e.value
