"""Data: dual-window batching, packed token streams, long-corpus loaders, the stdlib corpus, tokenizer training.
The window geometry (``e_range``, the two windows, their labels) is :mod:`torchtune_longshort.windows`.

``DualWindowBatcher`` and ``PackedTokenStream`` (torch) are imported on first use, so that the stdlib-only modules
of this package (``text_files``, ``stdlib_corpus``, ``corpus``, ...) are read without torch: the eval task pack, which
lm-eval imports whole on every run, reads them."""

from typing import Any

__all__ = ["DualWindowBatcher", "PackedTokenStream"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from torchtune_longshort.data import dual_window  # deferred: torch (see the module docstring)

        return getattr(dual_window, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
