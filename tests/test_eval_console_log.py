"""The pack's log lines print as lm-eval's own (torchtune_longshort.eval.console_log): with lm-eval's logging set up
as its CLI sets it up (``lm_eval.utils.setup_logging``, the root logger without handlers), a pack INFO line shows in
lm-eval's format, once, and LMEVAL_LOG_LEVEL=WARNING quiets it as it quiets lm-eval's INFO lines. Before, the pack's
INFO lines never printed and its warnings came bare (logging's last resort)."""

from __future__ import annotations

import contextlib
import logging
import re

import lm_eval.utils
import pytest

from torchtune_longshort.eval.console_log import follow_lm_eval_logging, setup_cli_logging
from torchtune_longshort.eval.model.response_cache import drop_refusals
from torchtune_longshort.eval.tasks.common.unavailable import RefusedText

# lm-eval's console format: "%(asctime)s %(levelname)-8s [%(short_name)s:%(lineno)d] %(message)s"
LINE = re.compile(r"^(\d{4}-\d\d-\d\d:\d\d:\d\d:\d\d) (\w+)( +)\[([\w.]+):(\d+)\] (.*)$")
DROPPED = "--use_cache: 1 refused request of an earlier run dropped from the cache, to be asked again"


@pytest.fixture
def cli_logging(monkeypatch):
    """lm-eval's logging as a fresh CLI process has it (its handler on the test's stderr, no root handler); every
    logger touched is put back afterwards."""
    loggers = [logging.getLogger(n) for n in ("lm_eval", "torchtune_longshort")]
    for lg in loggers:
        monkeypatch.setattr(lg, "handlers", [])
        monkeypatch.setattr(lg, "propagate", True)
    monkeypatch.setattr(lm_eval.utils, "_LOGGING_CONFIGURED", False)
    monkeypatch.delenv("LMEVAL_LOG_LEVEL", raising=False)
    levels = [lg.level for lg in loggers]
    yield
    for lg, level in zip(loggers, levels):
        lg.setLevel(level)


@contextlib.contextmanager
def _no_root_handler():
    """The root logger without pytest's capture handlers (added per test phase), as in a CLI process."""
    saved = logging.root.handlers[:]
    logging.root.handlers.clear()
    try:
        yield
    finally:
        logging.root.handlers[:] = saved


def _setup_and_log(capsys, later_verbosity=None) -> list:
    with _no_root_handler():
        lm_eval.utils.setup_logging()  # what lm-eval's CLI (and longshort-eval) does first
        assert follow_lm_eval_logging()
        if later_verbosity is not None:  # simple_evaluate's setup_logging(verbosity=...), after the pack's follow
            lm_eval.utils.setup_logging(verbosity=later_verbosity)
        logging.getLogger("lm_eval.evaluator").info("lm-eval's own line")
        logging.getLogger("lm_eval.evaluator").warning("lm-eval's own warning")
        assert drop_refusals({"k": RefusedText("too long"), "kept": "text"}) == 1  # the pack's INFO line
        logging.getLogger("torchtune_longshort.eval.tasks.common.unavailable").warning("a pack warning")
    return capsys.readouterr().err.splitlines()


def test_pack_info_line_prints_in_lm_eval_format_once(cli_logging, capsys):
    err = _setup_and_log(capsys)
    ours = [line for line in err if DROPPED in line]
    assert len(ours) == 1, err  # once: not again through the root logger
    theirs, mine = LINE.match(next(line for line in err if "lm-eval's own line" in line)), LINE.match(ours[0])
    assert theirs and mine, err
    assert (mine[2], mine[3], mine[6]) == (theirs[2], theirs[3], DROPPED)  # level, its padding, the message
    assert mine[4] == "torchtune_longshort.eval.model.response_cache"
    warned = LINE.match(next(line for line in err if "a pack warning" in line))
    assert warned and warned[2] == "WARNING", err  # not the bare message of logging's last resort


def test_lmeval_log_level_quiets_the_pack_as_it_quiets_lm_eval(cli_logging, capsys, monkeypatch):
    monkeypatch.setenv("LMEVAL_LOG_LEVEL", "WARNING")
    err = "\n".join(_setup_and_log(capsys))
    assert "lm-eval's own line" not in err and DROPPED not in err
    assert "lm-eval's own warning" in err
    assert re.search(r" WARNING  \[torchtune_longshort\.[\w.]+:\d+\] a pack warning", err), err


def test_a_later_lm_eval_level_counts_for_the_pack_too(cli_logging, capsys):
    """The pack's lines follow lm-eval's level when they are logged, not a copy taken when the pack's tasks were
    built (before, a later setup_logging(verbosity=WARNING) quieted lm-eval's INFO lines and not the pack's)."""
    err = "\n".join(_setup_and_log(capsys, later_verbosity=logging.WARNING))
    assert "lm-eval's own line" not in err and DROPPED not in err
    assert "lm-eval's own warning" in err and "a pack warning" in err


@pytest.mark.parametrize("rank", ["0", "1"])
def test_the_pack_info_lines_print_on_rank_0_alone(cli_logging, capsys, monkeypatch, rank):
    """Under torchrun (RANK, WORLD_SIZE), as the model's progress bars: the pack's INFO lines once, on rank 0; its
    warnings from every rank, lm-eval's own lines as lm-eval prints them (before: each INFO line once per process)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    err = "\n".join(_setup_and_log(capsys))
    assert (DROPPED in err) == (rank == "0"), err
    assert "a pack warning" in err and "lm-eval's own line" in err


def test_nothing_changes_without_lm_eval_set_up_or_with_a_root_handler(cli_logging):
    with _no_root_handler():
        assert follow_lm_eval_logging() is False  # lm-eval's logging not set up: the library's records go to the root
    lm_eval.utils.setup_logging()
    logging.root.addHandler(logging.NullHandler())  # an application's own logging (pytest's capture alike)
    assert follow_lm_eval_logging() is False
    assert logging.getLogger("torchtune_longshort").propagate and not logging.getLogger("torchtune_longshort").handlers


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_warning_alike_on_every_rank_prints_on_rank_0_alone(cli_logging, capsys, monkeypatch, rank):
    """A data set's reason (each process reads the whole data set) prints once under torchrun, on rank 0 (walked:
    `torchrun --nproc_per_node 2 -m torchtune_longshort.eval run ... longshort_passkey` printed 'longshort_passkey
    at length 64: ... -- no score for it' twice, one per process, and its --limit warning twice); a warning of a
    process's own share of the documents (a request refused) still prints from every rank. The reference: the
    lines one process prints."""
    from torchtune_longshort.eval.tasks.common.unavailable import placeholder

    def logged():
        with _no_root_handler():
            lm_eval.utils.setup_logging()
            assert follow_lm_eval_logging()
            placeholder("my_task", "length=64: too short", {"text": ""})
            logging.getLogger("torchtune_longshort.eval.model.limits").warning("a request refused")
        return [LINE.match(line)[6] for line in capsys.readouterr().err.splitlines() if LINE.match(line)]

    one = logged()
    assert len(one) == 2 and one[0].startswith("my_task: length=64: too short -- no score for it"), one
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    assert logged() == (one if rank == "0" else one[1:])


@pytest.mark.parametrize("rank", ["0", "1"])
def test_longshort_eval_prints_lm_eval_info_lines_on_rank_0_alone(cli_logging, capsys, monkeypatch, rank):
    """longshort-eval under torchrun / accelerate launch: lm-eval's own INFO lines once, on rank 0, but the one
    naming its rank (each process's share); warnings from every rank (walked with SmolLM2 and 2 CPU processes:
    `Selected Tasks`, `Running loglikelihood requests` ... printed twice). The reference: one process's lines."""
    def logged():
        with _no_root_handler():
            setup_cli_logging()
            logging.getLogger("lm_eval.evaluator").info("Running loglikelihood requests")
            logging.getLogger("lm_eval.api.task").info(f"Building contexts for my_task on rank {rank}...")
            logging.getLogger("lm_eval.evaluator").warning("lm-eval's own warning")
            assert drop_refusals({"k": RefusedText("too long")}) == 1  # the pack's INFO line
        return [m[6] for m in map(LINE.match, capsys.readouterr().err.splitlines()) if m]

    one = logged()
    assert one == ["Running loglikelihood requests", f"Building contexts for my_task on rank {rank}...",
                   "lm-eval's own warning", DROPPED], one
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    assert logged() == (one if rank == "0" else one[1:3])
