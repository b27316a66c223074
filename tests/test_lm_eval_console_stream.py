"""lm-eval's console handler is made once a process, on the ``sys.stderr`` of that moment
(``lm_eval.utils.setup_logging``): made under a test's capsys (longshort-eval's main run in-process), it wrote to a
capture closed after that test, and a later test's in-process run lost its lines ('--- Logging error --- ...
ValueError: I/O operation on closed file'; tests/test_task_faults.py and tests/test_run_cli_faults.py each guarded
their own). conftest's ``_lm_eval_console_on_live_stderr`` starts each test with it on the live stderr. The two
tests run in this order (pytest keeps a file's order)."""

from __future__ import annotations

import logging
import sys


def _consoles():
    return [h for h in logging.getLogger("lm_eval").handlers if type(h) is logging.StreamHandler]


def test_lm_evals_console_made_under_capsys(capsys):
    from lm_eval.utils import setup_logging

    setup_logging()
    for handler in _consoles():  # as a process's first setup_logging under capsys binds it (an earlier one did not)
        handler.stream = sys.stderr
    logging.getLogger("lm_eval").warning("a line under capsys")
    assert "a line under capsys" in capsys.readouterr().err


def test_a_later_test_logs_through_it_without_a_closed_stream(monkeypatch):
    failed = []  # logging's own report of a record it could not write (it prints '--- Logging error ---')
    for handler in _consoles():
        monkeypatch.setattr(handler, "handleError", failed.append)
    assert _consoles()
    logging.getLogger("lm_eval").warning("a later test's line")
    assert [r.getMessage() for r in failed] == [] and not any(h.stream.closed for h in _consoles())
