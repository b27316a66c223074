"""A document source read in a seeded random order, optionally cut into pieces at line ends first
(:class:`Shuffled`): the stdlib corpus' ``shuffle_seed`` / ``piece_chars``."""

from __future__ import annotations

import random
from typing import Callable, Iterator, List, Optional

Documents = Callable[[], Iterator[str]]


def split_lines_into_pieces(text: str, piece_chars: int) -> List[str]:
    """Cut ``text`` at line ends into pieces of about ``piece_chars`` characters (a piece ends at the first line end
    at or after ``piece_chars``; a single longer line stays whole). Joined, the pieces give ``text`` back."""
    if not isinstance(piece_chars, int) or isinstance(piece_chars, bool) or piece_chars < 1:
        raise ValueError(f"piece_chars={piece_chars!r} must be an int >= 1")
    pieces, current, size = [], [], 0
    for line in text.splitlines(keepends=True):
        current.append(line)
        size += len(line)
        if size >= piece_chars:
            pieces.append("".join(current))
            current, size = [], 0
    if current:
        pieces.append("".join(current))
    return pieces


class Shuffled:
    """A document source read in a seeded random order, optionally cut into pieces of about ``piece_chars``
    characters first (at line ends), so that consecutive training windows come from unrelated text instead of
    one package after another in file order. The order is the same on every call (every epoch), so a run resumes
    exactly. The whole source is held in memory: for local corpora such as the stdlib (12 MB), not for streams."""

    def __init__(self, source: Documents, seed: int, piece_chars: Optional[int] = None):
        docs = list(source())
        if piece_chars is not None:
            docs = [piece for doc in docs for piece in split_lines_into_pieces(doc, piece_chars)]
        random.Random(seed).shuffle(docs)
        self._docs = docs
        self.files = getattr(source, "files", None)
        self.description = f"{source!r} shuffled (seed {seed}" + (
            f", pieces of ~{piece_chars} chars)" if piece_chars is not None else ")")

    def __call__(self) -> Iterator[str]:
        return iter(self._docs)

    def __repr__(self) -> str:
        return f"<documents: {self.description}>"
