"""``document_limit`` read directly (tests/test_ppl_limit_short_source.py reaches it only through a whole lm-eval run
with an integer ``limit``): the ``limit`` of the ``lm_eval.evaluator`` frame building the task, as lm-eval's own
command line parses ``--limit`` (a float: ``2`` is ``2.0``), None for a fraction (lm-eval's
``evaluator_utils`` counts ``ceil(len(docs) * limit)`` documents for ``limit < 1``: no count before the documents
exist), and a ``limit`` local of any frame outside ``lm_eval.evaluator`` is not it. The evaluator frame is a function
compiled with that module name as its globals' ``__name__``, as lm-eval's own frames have it."""

from __future__ import annotations

import inspect

import pytest
from lm_eval import evaluator_utils
from lm_eval._cli.harness import HarnessCLI

from torchtune_longshort.eval.tasks.common.limit_share import document_limit


def _probe():
    limit = 7  # a local of that name outside lm_eval.evaluator: not lm-eval's limit
    assert limit == 7
    return document_limit()


def _under_evaluator(limit):
    ns = {"__name__": "lm_eval.evaluator", "_probe": _probe}
    exec("def simple_evaluate(limit=None):\n    return _probe()\n", ns)
    return ns["simple_evaluate"](limit=limit)


def _cli_limit(text: str):
    return HarnessCLI()._parser.parse_args(["run", "--tasks", "x", "--limit", text]).limit


@pytest.mark.parametrize("text,count", [("1", 1), ("2", 2), ("20", 20)])
def test_lm_evals_parsed_count_is_the_document_limit(text, count):
    assert isinstance(_cli_limit(text), float)  # what lm-eval's command line hands simple_evaluate
    assert _under_evaluator(_cli_limit(text)) == count


def test_a_fraction_none_or_no_evaluator_frame_gives_no_limit():
    assert "if limit < 1.0 else int(limit)" in inspect.getsource(evaluator_utils)  # lm-eval's fraction rule
    assert _under_evaluator(_cli_limit("0.5")) is None
    assert _under_evaluator(None) is None
    assert _probe() is None
