"""Hand mutants of config/values survived every test that reaches them (mutants16): number() taking a strict minimum
as inclusive (clip_grad_norm=0, a study's alpha=0 accepted) and a number that is not finite (nan, -inf); with
clip_grad_norm=0 torch's clip_grad_norm_ scales every gradient to zero, a run that trains nothing, without a word;
integer() taking True for 1 (max_steps: true); text() taking an empty string. The references:
torch.nn.utils.clip_grad_norm_ itself, math.isfinite, isinstance(True, int), and len of the text."""

from __future__ import annotations

import math
import re

import pytest
import torch

from torchtune_longshort.config.values import number
from torchtune_longshort.training.recipe_config.recipe import _clip_grad_norm


def test_a_clip_of_zero_is_refused_as_torch_would_train_nothing_with_it():
    weight = torch.nn.Parameter(torch.ones(3))
    (weight * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    torch.nn.utils.clip_grad_norm_([weight], max_norm=0.0)
    assert torch.count_nonzero(weight.grad) == 0  # the reference: every gradient scaled to nothing
    for zero in (0, 0.0):
        with pytest.raises(ValueError, match=r"clip_grad_norm=0(\.0)? is not accepted: expected a finite number > 0"):
            _clip_grad_norm("clip_grad_norm", zero)
        with pytest.raises(ValueError, match="a finite number > 0"):
            number(0.0, inclusive=False)("study.alpha", zero)
    assert number(0.0, inclusive=False)("study.alpha", 1e-9) == 1e-9
    assert number(0.0)("loss.alpha", 0) == 0.0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 1.5, 0, 7])
def test_a_number_is_taken_only_where_it_is_finite(value):
    for check in (number(0.0), number(-10.0, inclusive=False)):
        if math.isfinite(value):
            assert check("loss.alpha", value) == float(value)
        else:
            with pytest.raises(ValueError, match="is not accepted: expected a finite number"):
                check("loss.alpha", value)


def test_a_count_of_true_is_refused_though_python_counts_it_an_int():
    from torchtune_longshort.config.values import integer

    assert isinstance(True, int) and True == 1  # the reference: a bool passes an int check alone
    for value in (True, False):
        with pytest.raises(ValueError, match=rf"max_steps={value} is not accepted: expected an integer >= 0"):
            integer(0)("max_steps", value)
    assert integer(0)("max_steps", 1) == 1


def test_an_empty_text_is_refused():
    from torchtune_longshort.config.values import text

    for value in ("", "x"):
        if len(value) == 0:
            with pytest.raises(ValueError, match=r"name='' is not accepted: expected a non-empty string"):
                text("name", value)
        else:
            assert text("name", value) == value


@pytest.mark.parametrize("name", ["cuda:x", "cuda:", "cuda:-1", "cuda:1x", "cpu:0", "mps:", "cpu\n"])
def test_a_cuda_device_without_an_index_number_is_refused(name):
    """values.device_name taking any 'cuda:' text (mutants16: cuda:x passed the name check, left to torch's own
    'Invalid device string' traceback); torch.device is the reference for what a device string is."""
    from torchtune_longshort.config.values import device_name
    from torchtune_longshort.devices import device_problem

    if name not in ("cuda:-1", "cpu:0"):  # torch takes cpu:0, a name torch.cuda / mps code paths never see here
        with pytest.raises(RuntimeError):
            torch.device(name)
    forms = "cpu, cuda, cuda:N, mps or mps:N"
    with pytest.raises(ValueError, match=rf"device={re.escape(repr(name))} is not accepted: expected {forms}"):
        device_name("device", name)
    # what every entry point's device rule takes (devices.device_problem names the same forms), on any machine:
    # mps:0 was refused by the config check while require_device took it
    for ok in ("cpu", "cuda", "cuda:1", "mps", "mps:0"):
        assert device_name("device", ok) == ok
        assert "not a device name" not in (device_problem(ok) or "")
