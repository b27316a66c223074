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
