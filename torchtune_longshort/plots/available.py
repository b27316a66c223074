"""Whether figures can be drawn here: matplotlib is a declared dependency, so only a broken environment lacks it;
the commands that draw ask :func:`matplotlib_problem` first and say so in one line (a study or a synthetic run
refuses before it trains, a report writes its tables without figures) instead of ending in a traceback."""

from __future__ import annotations

import importlib.util
from typing import Optional


def matplotlib_problem() -> Optional[str]:
    """Why no figure can be drawn here (None when matplotlib imports): ``matplotlib cannot be imported (<error>):
    `pip install matplotlib``` for the caller to finish with what to rerun."""
    try:
        importlib.import_module("matplotlib")
        importlib.import_module("matplotlib.figure")  # a package that imports but cannot draw is no better
    except ImportError as e:
        return f"matplotlib cannot be imported ({e}): `pip install matplotlib`"
    return None


def matplotlib_missing() -> Optional[str]:
    """:func:`matplotlib_problem` where matplotlib is not installed at all (``importlib.util.find_spec`` finds no
    package), else None without importing it: the import writes its font cache and config folder under HOME, so a
    command asks this before work of its own (a model's fetch) and whether it imports after its checks."""
    return None if importlib.util.find_spec("matplotlib") is not None else matplotlib_problem()
