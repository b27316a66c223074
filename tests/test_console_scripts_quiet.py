"""Every console script pip installs (pyproject.toml's [project.scripts], read here as the independent list) ends as
``cat`` does when its reader leaves (``longshort-validate run.yaml | head -1``: no output, exit 141), through
``refusals.quiet_when_the_reader_leaves``. 0163aba put a context manager between that decorator and
``longshort-validate``'s ``main``: the decorator wrapped the context manager, and ``longshort-validate run.yaml | true``
ended in a ``BrokenPipeError`` traceback, exit 1 (141 before)."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

from torchtune_longshort.refusals import quiet_when_the_reader_leaves

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
# the wrapper's own function: a callable is wrapped when it is that closure (functools.wraps copies the name and doc)
WRAPPER_CODE = quiet_when_the_reader_leaves(lambda: None).__code__


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_each_console_script_ends_quietly_when_its_reader_leaves(script):
    module, _, name = SCRIPTS[script].partition(":")
    entry = getattr(importlib.import_module(module), name)
    assert getattr(entry, "__code__", None) is WRAPPER_CODE, (
        f"{script} ({SCRIPTS[script]}) is not wrapped by quiet_when_the_reader_leaves")
