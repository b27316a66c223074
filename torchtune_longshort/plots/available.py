"""Whether figures can be drawn here: matplotlib is a declared dependency, so only a broken environment lacks it;
the commands that draw ask :func:`matplotlib_problem` first and say so in one line (a study or a synthetic run
refuses before it trains, a report writes its tables without figures) instead of ending in a traceback."""

from __future__ import annotations

from typing import Optional


def matplotlib_problem() -> Optional[str]:
    """Why no figure can be drawn here (None when matplotlib imports): ``matplotlib cannot be imported (<error>):
    `pip install matplotlib``` for the caller to finish with what to rerun."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401  (a package that imports but cannot draw is no better)
    except ImportError as e:
        return f"matplotlib cannot be imported ({e}): `pip install matplotlib`"
    return None
