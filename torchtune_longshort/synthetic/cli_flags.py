"""Which of the synthetic command's flags go with which of its modes (a single run, the paper's figures, the beyond
figures, ``--replot``, ``--model linear``): a flag the mode does not read was ignored without a word, and is refused
in one line naming it; the messages name the flags the user typed, not ``RunConfig``'s fields; and what
a command of each mode stopped part-way leaves (:func:`interrupted`)."""

from __future__ import annotations

import argparse
import re
from typing import Collection, List, Sequence

from .experiments import PAPER_FIGURES


def flag_names(message: str) -> str:
    """RunConfig names its fields (``num_heads=3``); the message names the flags the user typed (``--heads=3``)."""
    return re.sub(r"(?<![\w-])(" + "|".join(_FLAG_OF) + r")=", lambda m: f"{_FLAG_OF[m.group(1)]}=", message)


# RunConfig's field -> this CLI's flag, where the two names differ
_FLAG_OF = {"max_steps": "--steps", "num_layers": "--layers", "num_heads": "--heads", "batch_size": "--batch-size",
            "l_train": "--l-train", "l_test": "--l-test", "task": "--task", "bits": "--bits", "pe": "--pe",
            "outrep": "--outrep", "model": "--model", "dim": "--dim", "lr": "--lr", "optimizer": "--optimizer",
            "seeds": "--seeds", "workers": "--workers", "figure": "--figure", "lrs": "--lrs", "l_trains": "--l-trains",
            "seed": "--seed"}


# the flags of a single run only: each figure sets them per curve itself (``experiments.figure_curves``)
_SINGLE_RUN_FLAGS = ("task", "bits", "pe", "outrep", "model", "seed")


def check_single_run_flags(argv: Sequence[str], options: Collection[str]) -> None:
    """With --figure, a flag a figure sets per curve (--task, --pe, ...) was ignored without a word: refused when
    given at all (compared with its default, ``--task length`` passed and was ignored). ``options``: every option
    string of the parser (an exact one is never another's abbreviation)."""
    for name in _SINGLE_RUN_FLAGS:
        if any(head == f"--{name}" or (head not in options and len(head) > 2 and f"--{name}".startswith(head))
               for head in (arg.split("=", 1)[0] for arg in argv if arg.startswith("--"))):  # (--tas: argparse's)
            raise ValueError(f"--{name} applies to a single run (without --figure); each figure sets its curves' "
                             f"{name} itself (--figure --seeds sets the seeds): drop --{name}")


# the flags the paper's figures apply to every curve and the beyond figures do not read (each fixes its own runs)
_PAPER_FIGURE_FLAGS = ("steps", "lr", "dim", "heads", "layers", "l-train", "l-test", "batch-size", "optimizer", "cache")


def _given(argv: Sequence[str], names: Sequence[str]) -> List[str]:
    """The flags of ``names`` (without their ``--``) that ``argv`` gives."""
    return [f"--{n}" for n in names if any(arg.split("=", 1)[0] == f"--{n}" for arg in argv)]


def _applies(flags: Sequence[str]) -> str:
    return "applies" if len(flags) == 1 else "apply"


def check_replot_flags(argv: Sequence[str]) -> None:
    """--replot draws the PNGs from the files a run wrote and trains nothing: a training flag was ignored without a
    word (``--replot --steps 3 --lrs 1,2 --cache zz`` said "redrew 2 figure(s)")."""
    given = _given(argv, _PAPER_FIGURE_FLAGS + ("lrs", "l-trains", "seeds", "workers"))
    if given:
        raise ValueError(f"{', '.join(given)} {_applies(given)} to training, and --replot trains nothing: it "
                         "redraws the figures from the files their run wrote in --out; drop it")


# the flags the linear-attention model (App. C.1) does not read: it has no positional encoding, one layer, one head
_TRANSFORMER_FLAGS = ("pe", "layers", "heads")


def check_linear_model_flags(argv: Sequence[str]) -> None:
    """A single run of ``--model linear``: a flag of the transformer's was recorded in run.json and read by nothing
    (``--pe rope``)."""
    flags = _given(argv, _TRANSFORMER_FLAGS)
    if flags:
        raise ValueError(f"{', '.join(flags)} {_applies(flags)} to --model transformer: the linear-attention model "
                         "(App. C.1) has no positional encoding and one layer and head; drop it")


def check_beyond_flags(argv: Sequence[str]) -> None:
    """The beyond figures alone: a flag they do not read (``--steps 1`` trained each probe for its own steps, without
    a word, and --help said the flag applied to every curve) is refused."""
    given = _given(argv, _PAPER_FIGURE_FLAGS)
    if given:
        raise ValueError(f"{', '.join(given)} {_applies(given)} to the paper's figures (all, 1a, ..., theory), not "
                         "to the beyond figures, which fix their own runs: drop it")


# the flags only figures read (each None unless given), with the single run's own flag where it has one
_FIGURE_FLAGS = {"lrs": "--lr", "l_trains": "--l-train", "seeds": "--seed", "workers": None, "cache": None}


def check_figure_flags(a: argparse.Namespace) -> None:
    """Without --figure, a flag only figures read (--lrs: the run trained at --lr's default) was ignored without a
    word: refused."""
    for name, own in _FIGURE_FLAGS.items():
        if getattr(a, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} applies with --figure only" + (f" (a single run takes {own})" if own else "")
                             + f": drop {flag}, or add --figure")


# what a figure run stopped by Ctrl-C / SIGTERM leaves (the files are written together once every run has trained and
# every figure is drawn; a stop while they are written waits for the last)
INTERRUPTED = "nothing is written until every run has trained and every figure is drawn"


def interrupted(a: argparse.Namespace) -> str:
    """What a command stopped by a signal (or a worker killed) leaves, and how to go on: only the paper's figures
    keep runs, in --cache (a single run and the beyond figures refuse --cache; the line told every mode to use it)."""
    if a.replot:
        return "--replot trains nothing; run it again"
    if a.figure is None:
        return "nothing is written until the run has trained; run it again"
    names = {n.strip() for n in a.figure.split(",")}
    if not names & {"all", *PAPER_FIGURES}:
        return f"{INTERRUPTED}; the beyond figures keep no finished run: run it again"
    if a.cache is None:
        return (f"{INTERRUPTED}; the runs that finished are not kept (with --cache DIR they are, and a rerun reuses "
                "them)")
    return f"{INTERRUPTED}; the runs that finished are kept in {a.cache} and the same command reuses them"
