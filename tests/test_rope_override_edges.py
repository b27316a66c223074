"""Boundaries of a RoPE override's checks (``models.rope_override``), each against an independent reference: lm-eval's
own parser of ``--model_args`` values, the closed form of the positions a factor covers (``factor x pre-trained``)
and the factor a length needs (``ceil(length / pre-trained)``). Hand mutation testing found each of these unasked:
a flipped comparison or a floor for a ceiling passed every other test."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from lm_eval.utils import simple_parse_args_string

from torchtune_longshort.models.rope_override import (check_override_length, factor_from_length_note, override_spec,
                                                      parse_override, raise_as_typed)

PRE = 256  # pre-trained positions
FOLDER = SimpleNamespace(path=Path("ck"))  # only its path is named; the spec gives the pre-trained positions


@pytest.mark.parametrize("typed", ["True", "FALSE", "true", "2", "2.5", "1e3", "abc"])
def test_a_value_reads_as_lm_evals_model_args_read_it(typed):
    """``--rope yarn,rope_truncate=True`` and ``--model_args rope_truncate=True`` are one value: lm-eval's
    ``simple_parse_args_string`` reads ``True`` / ``FALSE`` case-blind as booleans, ``2`` as an int."""
    want = simple_parse_args_string(f"rope_truncate={typed}")["rope_truncate"]
    got = parse_override(f"yarn,rope_truncate={typed}")["truncate"]
    assert (got, type(got)) == (want, type(want))


def test_max_seq_len_at_the_pretrained_positions_is_factor_one_not_below():
    """``rope=yarn,rope_max_seq_len=<pre-trained>``: factor ``L / L = 1``, accepted; one below is refused."""
    check_override_length({"method": "yarn", "max_seq_len": PRE}, PRE)
    with pytest.raises(ValueError, match=rf"rope_max_seq_len={PRE - 1} is below the {PRE} pre-trained"):
        check_override_length({"method": "yarn", "max_seq_len": PRE - 1}, PRE)


@pytest.mark.parametrize("factor", [2, 3])
def test_max_seq_len_up_to_factor_times_pretrained_is_covered(factor):
    """Linear RoPE by ``s`` covers ``s x L`` positions exactly: that many accepted, one more refused."""
    reach = factor * PRE
    check_override_length({"method": "linear", "factor": factor, "max_seq_len": reach}, PRE)
    with pytest.raises(ValueError, match=rf"past the {reach} positions"):
        check_override_length({"method": "linear", "factor": factor, "max_seq_len": reach + 1}, PRE)


@pytest.mark.parametrize("asked", [PRE * 2 + 1, 600, PRE * 3])
def test_the_factor_advised_past_the_reach_is_the_ceiling(asked):
    """The advised ``rope_factor`` (and, for a method that scales nothing, the example's) covers the length asked:
    ``ceil(asked / L)``, not the floor, which would fall short again."""
    need = math.ceil(asked / PRE)
    with pytest.raises(ValueError, match=rf"give rope_factor={need}, or rope_max_seq_len <= {2 * PRE}"):
        check_override_length({"method": "linear", "factor": 2, "max_seq_len": asked}, PRE)
    with pytest.raises(ValueError, match=rf"\(rope=yarn,rope_factor={need}\)"):
        check_override_length({"method": "default", "max_seq_len": asked}, PRE)


def test_clex_at_a_length_t_max_does_not_divide_is_told_the_ceiling():
    """CLEX without ``rope_t_max`` at 600 of 256 positions: its integer t_max would be 2 (512 covered); the fix is
    ``ceil(600 / 256) = 3``."""
    with pytest.raises(ValueError, match=rf"give rope_t_max={math.ceil(600 / PRE)}$"):
        factor_from_length_note(FOLDER, {"method": "clex", "original_max_seq_len": PRE}, 600, "max_length", "")


def test_a_factor_method_at_exactly_the_pretrained_length_is_said_factor_one():
    """``rope=yarn`` without a factor at ``max_length`` = the pre-trained positions: factor 1, said (a note); past
    them nothing to say; below them refused."""
    note = factor_from_length_note(FOLDER, {"method": "yarn", "original_max_seq_len": PRE}, PRE, "max_length", "")
    assert note is not None and "factor 1" in note
    assert factor_from_length_note(FOLDER, {"method": "yarn", "original_max_seq_len": PRE}, PRE + 1, "max_length",
                                   "") is None


def test_context_keys_are_taken_by_every_method():
    """``rope_original_max_seq_len`` and ``rope_base`` are the spec's context, which every method's build takes."""
    assert override_spec("yarn", {"factor": 2, "original_max_seq_len": 4096, "base": 500000.0}, "w") == {
        "method": "yarn", "factor": 2, "original_max_seq_len": 4096, "base": 500000.0}


def test_a_parameter_named_as_typed_leaves_longer_names_alone():
    """``max_seq_len`` becomes ``rope_max_seq_len`` as a word of its own, not inside ``original_max_seq_len``."""
    with pytest.raises(ValueError) as e:
        raise_as_typed(ValueError("max_seq_len=100 is below original_max_seq_len=256: give max_seq_len >= 256"),
                       {"method": "yarn", "max_seq_len": 100})
    assert str(e.value) == ("rope_max_seq_len=100 is below original_max_seq_len=256: give rope_max_seq_len >= 256")
