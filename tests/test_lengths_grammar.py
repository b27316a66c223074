"""The length grammar's edges (torchtune_longshort.lengths), each a hand mutant that survived the tests which used it:
an int 0 (BABILong's empty haystack, as JSON metadata gives it) refused where "0k" is read, a JSON ``true`` read as
1 token, a blank item or an empty list accepted or refused wrongly, the lengths sorted instead of kept in the given
order, ``minimum`` itself refused, and ``--length 0`` passing argparse. The reference: the grammar as its docstring
writes it (``<n>k`` is n * 1024, digits are themselves), spelt out here, and argparse's own exit status 2."""

import argparse

import pytest

from torchtune_longshort.lengths import length_arg, length_value, parse_length, parse_lengths


def _reference(label: str) -> int:
    label = label.strip()
    return int(label[:-1]) * 1024 if label.endswith("k") else int(label)


def test_an_int_is_read_as_its_label_is_zero_included():
    for label in ("0k", "0", "512", "1k", "4k"):
        n = _reference(label)
        assert parse_length(label) == parse_length(n) == n
        assert parse_lengths([n]) == parse_lengths(label) == [n]
    assert parse_length(-1) is None


def test_a_json_boolean_is_not_a_length():
    for flag in (True, False):
        assert parse_length(flag) is None
        with pytest.raises(ValueError, match=rf"max_seq_lengths={flag!r}: \[{flag!r}\] not accepted"):
            parse_lengths(flag)


def test_lists_keep_their_order_and_drop_blank_items_only():
    text = " 4k, 512 ,1k,"
    want = [_reference(s) for s in text.split(",") if s.strip()]
    assert want == [4096, 512, 1024]
    assert parse_lengths(text) == want and parse_lengths([" 4k", 512, "1k"]) == want
    assert parse_length(" 4k ") == 4096
    for empty in ("", " , ", []):
        with pytest.raises(ValueError, match=r"max_seq_lengths=.*: empty not accepted"):
            parse_lengths(empty)


def test_length_value_takes_its_minimum_and_refuses_below_it():
    assert length_value("k", 1) == 1 and length_value("k", "2k", minimum=2048) == 2048
    with pytest.raises(ValueError, match=r"^k='2047' is not accepted: expected a token count >= 2048"):
        length_value("k", "2047", minimum=2048)


def test_length_arg_refuses_zero_through_argparse(capsys):
    ap = argparse.ArgumentParser(prog="p")
    ap.add_argument("--length", type=length_arg)
    assert ap.parse_args(["--length", "1"]).length == 1 and ap.parse_args(["--length", "1k"]).length == 1024
    for bad in ("0", "0k", "-1", "e"):
        with pytest.raises(SystemExit) as e:
            ap.parse_args(["--length", bad])
        assert e.value.code == 2
        assert f"argument --length: invalid length (512, 1k, 4k, ...) value: '{bad}'" in capsys.readouterr().err
