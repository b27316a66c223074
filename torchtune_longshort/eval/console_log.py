"""The package's log lines on lm-eval's console, printed as lm-eval prints its own.

lm-eval 0.4.13 configures one logger, ``lm_eval`` (``lm_eval.utils.setup_logging``, the first step of its CLI): a
stderr handler formatted ``%(asctime)s %(levelname)-8s [%(short_name)s:%(lineno)d] %(message)s``, the level INFO or
``LMEVAL_LOG_LEVEL``, and no propagation to the root logger; ``simple_evaluate`` calls ``setup_logging`` again with
its ``verbosity`` (deprecated) once the evaluation is over. The package logs under ``torchtune_longshort.*``, which
lm-eval leaves alone: under ``longshort-eval`` and stock ``lm_eval --include_path`` its warnings reached logging's last
resort (the bare message, whatever the level) and its INFO lines (``prompt lengths not checked``, ``--use_cache: N
refused request(s) ...``) never printed. :func:`follow_lm_eval_logging` gives the ``torchtune_longshort`` logger a
handler that passes its records to lm-eval's handlers at the level lm-eval's logger has when the record is made.
"""

from __future__ import annotations

import logging

from torchtune_longshort.launcher import launched_rank

PACKAGE_LOGGER = "torchtune_longshort"
LM_EVAL_LOGGER = "lm_eval"
# ``extra=`` of a warning every process of a launcher logs alike, its words from the command line or from the whole
# data set each process reads, not from the process's share of the documents (a --limit's cells left out, a data
# set's reason): printed by rank 0 alone (2 processes printed each such line twice)
ALIKE_ON_EVERY_RANK = {"alike_on_every_rank": True}


class _LmEvalConsole(logging.Handler):
    """The package's records through lm-eval's handlers, at the ``lm_eval`` logger's level of the moment (a later
    ``setup_logging`` or ``LMEVAL_LOG_LEVEL`` counts as for lm-eval's own lines). Under a launcher (``torchrun``,
    ``accelerate launch``) the INFO lines print on rank 0 alone, as the model's progress bars do, and so do the
    warnings logged :data:`ALIKE_ON_EVERY_RANK`; the other warnings and errors print from every rank."""

    def handle(self, record: logging.LogRecord) -> bool:
        lm_eval_logger = logging.getLogger(LM_EVAL_LOGGER)
        if not lm_eval_logger.isEnabledFor(record.levelno):
            return False
        if (record.levelno < logging.WARNING or getattr(record, "alike_on_every_rank", False)) and launched_rank():
            return False
        for handler in lm_eval_logger.handlers:
            if record.levelno >= handler.level:
                handler.handle(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:  # handle() passes the record on; nothing is written here
        pass


# lm-eval's logger whose INFO line names the process it comes from (``Building contexts for <task> on rank N...``,
# each process's share of the documents): every rank prints its own
RANK_NAMED_LOGGER = "lm_eval.api.task"


class _RankZeroInfo(logging.Filter):
    """lm-eval's INFO lines on rank 0 alone under a launcher, but for :data:`RANK_NAMED_LOGGER`'s; warnings and
    errors from every rank, as the pack's own lines (:class:`_LmEvalConsole`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name == RANK_NAMED_LOGGER or not launched_rank()


def setup_cli_logging() -> None:
    """``longshort-eval``'s console: lm-eval's logging as its CLI sets it up first (``setup_logging``), the package's
    lines through it (:func:`follow_lm_eval_logging`), and, under several processes (``torchrun``, ``accelerate
    launch``), lm-eval's own INFO lines (``Selected Tasks``, ``Initializing longshort model``, ``Running loglikelihood
    requests``) on rank 0 alone: every process printed each (2 processes: twice). Stock ``lm_eval``'s lines are left
    as lm-eval prints them."""
    from lm_eval.utils import setup_logging  # deferred: lm-eval's import takes seconds (tasks-path needs none)

    setup_logging()
    follow_lm_eval_logging()
    for handler in logging.getLogger(LM_EVAL_LOGGER).handlers:
        if not any(isinstance(f, _RankZeroInfo) for f in handler.filters):
            handler.addFilter(_RankZeroInfo())


def follow_lm_eval_logging() -> bool:
    """Once lm-eval's logging is set up (its ``lm_eval`` logger has a handler), print the package's log records
    through lm-eval's handlers, at lm-eval's level when each record is made, without propagating them to the root
    logger (each line once), as ``setup_logging`` treats lm-eval's own loggers; ``LMEVAL_LOG_LEVEL=WARNING`` quiets
    both alike. The ``torchtune_longshort`` logger itself lets every record reach that handler (level DEBUG): the
    level that counts is lm-eval's. Called by ``longshort-eval`` / ``cli_run.run_cli`` after setting lm-eval's
    logging up, and by the pack's tasks and the ``longshort`` model when lm-eval builds them (stock ``lm_eval``);
    calling it again changes nothing.

    Nothing changes, and False is returned, where lm-eval's logging is not set up or the root logger has handlers
    (an application's ``logging.basicConfig``, pytest's capture): there the package's records go to the root's
    handlers as any library's do."""
    if not logging.getLogger(LM_EVAL_LOGGER).handlers or logging.root.handlers:
        return False
    package = logging.getLogger(PACKAGE_LOGGER)
    if not any(isinstance(handler, _LmEvalConsole) for handler in package.handlers):
        package.addHandler(_LmEvalConsole())
    package.setLevel(logging.DEBUG)
    package.propagate = False
    return True
