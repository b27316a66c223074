"""A count and its noun in a progress or report line: "1 length", "8 lengths" (a line that said "8 variants x 1
lengths" read as a slip)."""

from __future__ import annotations

from typing import Optional


def counted(n: int, noun: str, nouns: Optional[str] = None) -> str:
    """``"<n> <noun>"`` for ``n == 1``, else ``"<n> <nouns>"`` (``nouns`` defaults to ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"
