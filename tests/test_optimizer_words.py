"""An optimizer argument torch refuses (``longshort-validate tiny/longshort_stdlib.yaml optimizer.weight_decay=-1``)
was said in torch's words after every argument, naming the value twice ('optimizer (lr=0.003, weight_decay=-1,
fused=False): Invalid weight_decay value: -1'), or naming no field at all of a value of another kind ("'<=' not
supported between instances of 'float' and 'str'"); the config check now names the field, the value once and what
torch accepts of it. The reference: torch.optim's own checks, which refuse each value and take the bound."""

from __future__ import annotations

import re

import pytest
import torch

from torchtune_longshort.config.fields import build_section
from torchtune_longshort.training.recipe_config.optimizer import OptimizerConfig

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


@pytest.mark.parametrize("name,args", [("AdamW", {}), ("NAdam", {"decoupled_weight_decay": True})])
def test_a_decoupled_decay_that_zeroes_or_flips_the_weights_is_refused(name, args):
    """``optimizer.weight_decay=1e30`` trained 2 steps, then stopped on a NaN gradient whose advice named neither key.
    The reference: torch's own step with a zero gradient, which multiplies the weight by 1 - lr * weight_decay."""
    def stepped(decay):
        w = torch.nn.Parameter(torch.ones(1))
        opt = getattr(torch.optim, name)([w], lr=1e-3, weight_decay=decay, **args)
        w.grad = torch.zeros(1)
        opt.step()
        return w.item()

    for decay in (1000.0, 1e30):
        assert stepped(decay) <= 0  # every weight zeroed or flipped
        said = rf"^optimizer.weight_decay={re.escape(repr(decay))} with optimizer.lr=0.001 is not accepted: "
        # the factor torch's step gave, and 1 / lr = 1000
        said += rf".* 1 - lr \* weight_decay = {re.escape(f'{stepped(decay):.3g}')} at each step.* < 1 / lr = 1000 "
        with pytest.raises(ValueError, match=said):
            _check(name, weight_decay=decay, **args)
    assert stepped(999.0) > 0
    _check(name, weight_decay=999.0, **args)
    _check("SGD", weight_decay=1e30)  # L2 decay through the gradient: not refused
