"""Argument types the benchmark scripts share: a size that no run could use (``--steps 0``, ``--seq-len -5``) is
refused by argparse in one line (``error: argument --steps: 0: at least 1``) before any work, not met as a
traceback from the first tensor built with it (or, for ``--kills -1``, a table of a run that did nothing)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """``type=`` for a count or a size: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer of at least 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1")
    return value


def positive_ints(text: str) -> list:
    """``type=`` for a comma list of sizes (``--lengths 1024,2048``): integers of at least 1."""
    try:
        return [positive_int(v) for v in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: comma-separated integers of at least 1, such as 1024,2048") from None


def names_from(*known: str):
    """``type=`` for a comma list drawn from ``known`` (``--cases train,eval``): the list, or a one-line refusal."""
    def parse(text: str) -> list:
        names = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: comma-separated names from {', '.join(known)}")
        return names
    return parse


def length_by_rows(text: str) -> list:
    """``type=`` for ``LENGTHxROWS,...`` (``256x8,1024x4``): ``[(length, rows), ...]``, each at least 1."""
    try:
        points = [tuple(positive_int(v) for v in p.split("x")) for p in text.split(",")]
    except argparse.ArgumentTypeError:
        points = []
    if not points or any(len(p) != 2 for p in points):
        raise argparse.ArgumentTypeError(f"{text!r}: LENGTHxROWS pairs, comma-separated, such as 256x8,1024x4")
    return points
