"""Data: dual-window batching, packed token streams, long-corpus loaders, the stdlib corpus, tokenizer training.
The window geometry (``e_range``, the two windows, their labels) is :mod:`torchtune_longshort.windows`."""

from torchtune_longshort.data.dual_window import DualWindowBatcher, PackedTokenStream

__all__ = ["DualWindowBatcher", "PackedTokenStream"]
