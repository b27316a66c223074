"""A hand mutant of rope/checkpoint_code that survived (mutants41): a path into the package whose last part names
nothing (``...registry.is_dotted_path.nope``, an attribute a function lacks) taken for one that walks out of it, and
refused as code outside the package. The reference: Python's own lookup of the path (pkgutil.resolve_name), which
fails on that attribute without importing any module outside the package."""

from __future__ import annotations

import pkgutil
import sys

import pytest

from torchtune_longshort.rope.checkpoint_code import PACKAGE, check_checkpoint_path, checkpoint_code, shipped


def test_a_missing_attribute_inside_the_package_is_left_to_the_lookup():
    path = f"{PACKAGE}.rope.registry.is_dotted_path.nope"
    before = set(sys.modules)
    with pytest.raises(AttributeError):
        pkgutil.resolve_name(path)
    assert {m.split(".")[0] for m in set(sys.modules) - before} <= {PACKAGE}  # nothing outside it was imported
    assert shipped(path)
    with checkpoint_code(False):
        assert check_checkpoint_path(path, {}, "f/config.json", "longshort_family") is None
