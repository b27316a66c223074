"""A dotted path naming an attribute inside a class (a class held by a class, a staticmethod or classmethod, a class
attribute holding a family's row) was refused by the dotted-path registries as "does not import (ModuleNotFoundError:
No module named 'pkg.mod.Holder'; ...): ... must be importable ... (pip install its package ...)" although its module
imports; torchtune's ``_component_`` (``config._utils._get_component_from_path``, the independent reference here)
finds such paths, and the README says the registries take paths as it does. A part that is really missing is named as
such: "module X imports but has no attribute 'Y'"."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest
from torchtune.config._utils import _get_component_from_path

from user_modules import forget_user_module, write_user_module

from torchtune_longshort.loss import divergences
from torchtune_longshort.loss.divergences import divergence_fn
from torchtune_longshort.models import MODEL_FAMILIES
from torchtune_longshort.rope import ROPE_METHODS

PKG = "nested_own_pkg"
MOD = f"{PKG}.holders"

SOURCE = '''
import dataclasses

from torchtune_longshort.loss.divergences import js_per_position
from torchtune_longshort.models import MODEL_FAMILIES
from torchtune_longshort.rope import ROPE_METHODS


class Methods:
    class Mine(ROPE_METHODS["linear"]):
        pass

    Yarn = ROPE_METHODS["yarn"]


class Divs:
    @staticmethod
    def js(logits_p, logits_q):
        return js_per_position(logits_p, logits_q)

    @classmethod
    def js_too(cls, logits_p, logits_q):
        return js_per_position(logits_p, logits_q)


class Families:
    MINE = dataclasses.replace(MODEL_FAMILIES["llama"], name="mine")
'''


@pytest.fixture
def nested_module(tmp_path, monkeypatch):
    write_user_module(tmp_path, {f"{PKG}/__init__.py": "", f"{PKG}/holders.py": textwrap.dedent(SOURCE)},
                      monkeypatch)
    forget_user_module(PKG)
    yield
    forget_user_module(PKG)


def test_an_attribute_inside_a_class_is_found_as_torchtune_finds_it(nested_module):
    for path in (f"{MOD}.Methods.Mine", f"{MOD}.Methods.Yarn"):
        assert ROPE_METHODS[path] is _get_component_from_path(path)
    assert ROPE_METHODS[f"{MOD}.Methods.Mine"].method == f"{MOD}.Methods.Mine"  # the path a saved spec records
    assert ROPE_METHODS[f"{MOD}.Methods.Yarn"].method == "yarn"  # a shipped class keeps its name
    for path in (f"{MOD}.Divs.js", f"{MOD}.Divs.js_too"):
        assert divergence_fn(path) == _get_component_from_path(path)
        assert divergences.is_divergence(path)
    path = f"{MOD}.Families.MINE"
    assert MODEL_FAMILIES[path] == dataclasses.replace(_get_component_from_path(path), name=path)


def test_a_missing_part_is_named_as_missing(nested_module):
    cases = {
        f"{MOD}.Methods.Nope": f"class {MOD}.Methods has no attribute 'Nope'",
        f"{MOD}.Nope.Inner": f"module {MOD} imports but has no attribute 'Nope'",
        f"{PKG}.no_such_submodule.X": f"module {PKG} imports but has no attribute 'no_such_submodule'",
    }
    for path, words in cases.items():
        with pytest.raises(Exception):  # the reference refuses them too
            _get_component_from_path(path)
        with pytest.raises(ValueError) as info:
            ROPE_METHODS[path]
        assert str(info.value) == (f"{path!r}: {words}: a RoPE method of your own is a subclass of "
                                   "torchtune_longshort.rope.base.ScaledRoPE")
        assert path not in ROPE_METHODS
