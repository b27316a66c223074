"""How many documents the report says a ``--limit`` run evaluated, and n per heatmap cell
(``eval.report.results_io``), against lm-eval's own ``get_sample_size`` (the count it evaluates) and the closed form
of an even split. Hand mutation testing found these boundaries unasked: ``limit <= 1`` for ``< 1`` and a dropped
divisibility check passed every other test."""

from __future__ import annotations

from itertools import islice
from types import SimpleNamespace

import pytest
from lm_eval.evaluator_utils import get_sample_size

from torchtune_longshort.eval.report.results_io import _evaluated, even_cell_counts, lm_eval_limit


def _lm_eval_evaluates(docs: int, limit) -> int:
    """lm-eval's count: ``get_sample_size``, then the documents sliced to it (``islice``), so never past ``docs``."""
    n = get_sample_size(SimpleNamespace(eval_docs=list(range(docs))), limit)
    return len(list(islice(range(docs), n)))


@pytest.mark.parametrize("docs", [1, 7, 10])
@pytest.mark.parametrize("limit", [None, 0.05, 0.3, 0.99, 1.0, 1, 2, 2.0, 5, 50])
def test_evaluated_is_lm_evals_count(docs, limit):
    assert _evaluated(docs, limit) == _lm_eval_evaluates(docs, limit)


@pytest.mark.parametrize("limit", [1.0, 2.0, 3])
def test_a_whole_float_limit_is_a_count(limit):
    """``--limit 1.0`` is one document to lm-eval (not a fraction, 100%): returned as the int lm-eval counts."""
    got = lm_eval_limit(limit)
    assert (got, type(got)) == (get_sample_size(SimpleNamespace(eval_docs=list(range(100))), limit), int)


def test_a_fraction_limit_is_left_a_fraction():
    assert lm_eval_limit(0.5) == 0.5 and lm_eval_limit(None) is None


@pytest.mark.parametrize("total, n_cells", [(12, 4), (12, 3), (7, 2), (9, 4), (5, 5)])
def test_n_per_cell_only_where_the_samples_divide_evenly(total, n_cells):
    cells = [(f"{i}k", 0) for i in range(n_cells)]
    want = {c: total // n_cells for c in cells} if total % n_cells == 0 else {}
    assert even_cell_counts(total, None, cells) == want
    assert even_cell_counts(total, 3, cells) == {}  # a --limit run: which cells it cut is not known
