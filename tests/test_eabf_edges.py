"""EABF's edges: its query factor ``max(1, log(m + 1) / log(L))`` written naively (math.log) the reference, and the
layers it leaves unscaled counted by an integer. Four hand mutants of rope/abf.py survived test_rope_formulas,
test_rope_hf_parity, test_models_rope_scaling and test_models_rope_checkpoint (mutants12): original_max_seq_len=1
accepted (log(1) = 0: every query scaled by inf or NaN), exempt_layers=True taken as 1 (a YAML 'true'), and spec()
leaving exempt_layers out (a run's record rebuilt with the default 2); and one ignoring new_base (below)."""

from __future__ import annotations

import math

import pytest
import torch

from torchtune_longshort.rope import build_rope

D = 16


def _naive_factors(L: int, n: int):
    """The paper's factor per position, in Python floats; raises ZeroDivisionError where it is undefined."""
    return [max(1.0, math.log(m + 1) / math.log(L)) for m in range(n)]


@pytest.mark.parametrize("L", [1, 2, 3, 16])
def test_an_original_length_is_accepted_where_the_factor_is_defined(L):
    try:
        want = _naive_factors(L, 64)
    except ZeroDivisionError:
        with pytest.raises(ValueError, match=rf"original_max_seq_len={L} is not accepted: log\(L\) must be > 0"):
            build_rope("eabf", head_dim=D, max_seq_len=64, original_max_seq_len=L)
        return
    r = build_rope("eabf", head_dim=D, max_seq_len=64, original_max_seq_len=L, exempt_layers=0)
    torch.testing.assert_close(r.query_scale(torch.arange(64), 0), torch.tensor(want))


@pytest.mark.parametrize("value", [True, False, 1.0, -1, "2", None])
def test_exempt_layers_other_than_an_integer_are_refused(value):
    with pytest.raises(ValueError, match=rf"exempt_layers={value!r} is not accepted: expected an integer >= 0"):
        build_rope("eabf", head_dim=D, max_seq_len=64, original_max_seq_len=8, exempt_layers=value)


@pytest.mark.parametrize("value", [0, 1, 3])
def test_exempt_layers_leave_that_many_leading_layers_unscaled(value):
    r = build_rope("eabf", head_dim=D, max_seq_len=64, original_max_seq_len=8, exempt_layers=value)
    pos = torch.arange(64)
    assert [r.query_scale(pos, layer) is None for layer in range(5)] == [layer < value for layer in range(5)]


@pytest.mark.parametrize("value", [0, 1, 3])
def test_its_spec_rebuilds_the_same_unscaled_layers(value):
    """spec() is what a run records of its RoPE (model.rope_scaling); rebuilt from it, the module must leave the
    same layers unscaled (a record without exempt_layers came back with the default 2)."""
    r = build_rope("eabf", head_dim=D, max_seq_len=64, original_max_seq_len=8, exempt_layers=value)
    spec = dict(r.spec())
    again = build_rope(spec.pop("method"), head_dim=D, **spec)
    pos = torch.arange(64)
    assert [again.query_scale(pos, layer) is None for layer in range(5)] == [layer < value for layer in range(5)]


def test_its_frequencies_are_those_of_its_new_base():
    """EABF keeps ABF's frequencies: new_base^(-2i/d), written naively (a hand mutant building it on the default
    500 000 whatever new_base said survived, mutants12)."""
    r = build_rope("eabf", head_dim=D, max_seq_len=64, new_base=1_000_000.0, original_max_seq_len=8)
    torch.testing.assert_close(r.theta, torch.tensor([1_000_000.0 ** (-2 * i / D) for i in range(D // 2)]),
                               rtol=1e-6, atol=0)
