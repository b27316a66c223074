"""The edges of refusals.py the entry points' tests do not reach: a refusal that is a KeyError told without the
quotes str() adds, an empty message told by its type, LONGSHORT_TRACEBACK's off values, '--out=~/x' expanded, and a
stdout whose errors are 'surrogateescape' (Python's own under a C locale) writing what it cannot encode escaped.

References: KeyError's own str(); README's 'LONGSHORT_TRACEBACK=1 adds the traceback'; os.path.expanduser under the
HOME put in place; str.encode(..., 'backslashreplace'), as Python's stderr writes."""

import io
import sys

import pytest

from torchtune_longshort import refusals


class _KeyRefusal(refusals.Refusal, KeyError):
    pass


def test_a_keyerror_refusal_is_told_without_quotes_and_an_empty_one_by_its_type(monkeypatch):
    monkeypatch.delenv(refusals.TRACEBACK_ENV, raising=False)
    error = _KeyRefusal("max_step: an unknown key")
    assert str(error) == "'max_step: an unknown key'"  # the reference: KeyError's quotes
    assert refusals.fault_line(error) == "max_step: an unknown key"
    assert refusals.fault_line(ValueError(" \n ")) == "ValueError"


@pytest.mark.parametrize("value, shown", [("", False), ("0", False), ("false", False), (" No ", False),
                                          ("1", True), ("yes", True)])
def test_longshort_traceback_keeps_the_traceback_only_when_set_on(monkeypatch, value, shown):
    monkeypatch.setenv(refusals.TRACEBACK_ENV, value)
    assert refusals.fault_line(ValueError("x=1: bad")) == (None if shown else "x=1: bad")


def test_a_path_option_given_with_equals_is_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    parser = refusals.ArgumentParser(prog="p")
    parser.add_argument("--out", type=refusals.user_path)
    assert parser.parse_args(["--out=~/runs"]).out == str(tmp_path / "runs")
    assert parser.parse_args(["--out", " a b "]).out == " a b "  # a name's own spaces are kept


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
def test_a_stdout_that_cannot_encode_a_dash_writes_it_escaped(monkeypatch, errors):
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii", errors=errors)
    monkeypatch.setattr(sys, "stdout", out)
    refusals._escape_what_stdout_cannot_encode()
    out.write("a \u2014 b\n")
    out.flush()
    assert raw.getvalue() == "a \u2014 b\n".encode("ascii", "backslashreplace")
