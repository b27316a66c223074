"""The package's log lines on lm-eval's console, printed as lm-eval prints its own.

lm-eval 0.4.13 configures one logger, ``lm_eval`` (``lm_eval.utils.setup_logging``, the first step of its CLI): a
stderr handler formatted ``%(asctime)s %(levelname)-8s [%(short_name)s:%(lineno)d] %(message)s``, the level INFO or
``LMEVAL_LOG_LEVEL`` (its ``--verbosity`` is deprecated: lm-eval applies it only after the evaluation), and no
propagation to the root logger. The package logs under ``torchtune_longshort.*``, which lm-eval leaves alone: under
``longshort-eval`` and stock ``lm_eval --include_path`` its warnings reached logging's last resort (the bare message,
whatever the level) and its INFO lines (``prompt lengths not checked``, ``--use_cache: N refused request(s) ...``)
never printed. :func:`follow_lm_eval_logging` gives the ``torchtune_longshort`` logger lm-eval's handler and level.
"""

from __future__ import annotations

import logging

PACKAGE_LOGGER = "torchtune_longshort"
LM_EVAL_LOGGER = "lm_eval"


def follow_lm_eval_logging() -> bool:
    """Once lm-eval's logging is set up (its ``lm_eval`` logger has a handler), print the package's log records
    through that handler, at lm-eval's level, without propagating them to the root logger (each line once), exactly
    as ``setup_logging`` treats lm-eval's own loggers; ``LMEVAL_LOG_LEVEL=WARNING`` quiets both alike. Called by
    ``longshort-eval`` / ``cli_run.run_cli`` after setting lm-eval's logging up, and by the pack's tasks and the
    ``longshort`` model when lm-eval builds them (stock ``lm_eval``), so the level follows a later set-up too.

    Nothing changes, and False is returned, where lm-eval's logging is not set up or the root logger has handlers
    (an application's ``logging.basicConfig``, pytest's capture): there the package's records go to the root's
    handlers as any library's do."""
    lm_eval_logger = logging.getLogger(LM_EVAL_LOGGER)
    if not lm_eval_logger.handlers or logging.root.handlers:
        return False
    package = logging.getLogger(PACKAGE_LOGGER)
    for handler in lm_eval_logger.handlers:
        if handler not in package.handlers:
            package.addHandler(handler)
    package.setLevel(lm_eval_logger.getEffectiveLevel())
    package.propagate = False
    return True
