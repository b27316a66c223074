"""``devices.is_device_name`` against torch's own device parser: every name the rule takes is one ``torch.device``
reads as that kind; a name torch refuses (``'cpux'``, ``'cpu\\n'``, ``'cuda:'``) the rule refuses before any work,
and each form the rule takes is one :data:`~torchtune_longshort.devices.ACCEPTED` names (the refusal and
--help say it)."""

from __future__ import annotations

import re

import pytest
import torch

from torchtune_longshort.devices import ACCEPTED, is_device_name

TAKEN = ["cpu", "cuda", "cuda:0", "cuda:12", "mps", "mps:1"]
TORCH_REFUSES = ["cpux", "cpu\n", "cuda:", "cuda:a", "cuda0", "mps:-1", " cpu", "cuda:0:1", "cudax:0"]


def _form(name: str) -> str:
    return re.sub(r"\d+$", "N", name)


@pytest.mark.parametrize("name", TAKEN)
def test_a_name_the_rule_takes_is_one_torch_reads_and_accepted_names(name):
    assert is_device_name(name)
    assert torch.device(name).type == name.split(":")[0]
    assert _form(name) in [f.strip() for f in re.split(r",| or ", ACCEPTED)], ACCEPTED


@pytest.mark.parametrize("name", TORCH_REFUSES)
def test_a_name_torch_refuses_the_rule_refuses(name):
    with pytest.raises(RuntimeError):
        torch.device(name)
    assert not is_device_name(name)


def test_cpu_with_an_index_is_refused_as_accepted_lists_no_cpu_n():
    assert torch.device("cpu:0").type == "cpu"  # torch reads it; the rule, as ACCEPTED says, does not
    assert "cpu:N" not in ACCEPTED and not is_device_name("cpu:0")
