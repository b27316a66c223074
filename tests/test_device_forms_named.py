"""Every entry point that documents its device names the forms the one device rule takes
(``devices.is_device_name``): longshort-misalignment's ``--device`` help said "cpu, cuda, cuda:N" while its refusal
took ``mps`` and ``mps:0`` and named ``mps`` as accepted. The kinds are read by torch's own ``torch.device``."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from torchtune_longshort.devices import is_device_name

CANDIDATES = ("cpu", "cpu:0", "cuda", "cuda:3", "mps", "mps:0", "xpu", "meta", "hpu")


def _forms_taken():
    kinds = sorted({torch.device(c).type for c in CANDIDATES if is_device_name(c)})
    return kinds + (["cuda:N"] if is_device_name("cuda:3") else [])


def _misalignment_help():
    from torchtune_longshort.metrics.cli import _parser

    return next(a.help for a in _parser()._actions if "--device" in a.option_strings)


def _field_doc(cls):
    return next(f.metadata["doc"] for f in dataclasses.fields(cls) if f.name == "device")


def _recipe_doc():
    from torchtune_longshort.training.recipe_config import RecipeConfig

    return _field_doc(RecipeConfig)


def _study_eval_doc():
    from torchtune_longshort.study.eval_config import EvalConfig

    return _field_doc(EvalConfig)


@pytest.mark.parametrize("doc", [_misalignment_help, _recipe_doc, _study_eval_doc])
def test_each_entry_points_device_doc_names_every_form_the_rule_takes(doc):
    text = doc()
    assert "mps" in _forms_taken()  # the candidates reach past cpu and cuda
    for form in _forms_taken():
        assert form in text.replace(",", " ").split(), (form, text)
