"""Whole-file text decoded with replacement characters, said once per file.

The evaluation's local text (``ppl_data_files``, passkey's and BABILong's ``.txt`` haystacks) is read with
``encoding_errors="replace"`` (:func:`~torchtune_longshort.data.text_files.iter_documents`): a Latin-1 file
(``printf 'caf\\xe9\\n'``) was scored with U+FFFD in place of its bytes without a word, where training's reader
refuses the same file (``<file>: bytes that are not utf-8 (invalid continuation byte at byte 3)``).
:func:`decoded_and_said` decodes it as before and logs, once per file in a process (each length of a task reads its
files again), that many bytes in the training reader's words, and how to convert it.
"""

from __future__ import annotations

import codecs
import logging
import threading
from pathlib import Path
from typing import Set

from torchtune_longshort.plural import counted

logger = logging.getLogger(__name__)

_HANDLER = "torchtune_longshort.count_replaced"
_COUNT = threading.local()
_SAID: Set[str] = set()


def _count_replaced(error: UnicodeError):
    """``"replace"``'s answer (one U+FFFD per undecodable span), counting the bytes it stands for."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    _COUNT.bytes = getattr(_COUNT, "bytes", 0) + error.end - error.start
    return "\ufffd", error.end


codecs.register_error(_HANDLER, _count_replaced)


def decoded_and_said(path: Path, raw: bytes, encoding: str, first: UnicodeDecodeError) -> str:
    """``raw`` (the bytes of ``path``, whose strict decode raised ``first``) decoded as ``errors="replace"`` does,
    with one warning per file naming how many bytes were replaced."""
    _COUNT.bytes = 0
    text = raw.decode(encoding, _HANDLER)
    key = str(path.resolve())
    if key not in _SAID:
        _SAID.add(key)
        logger.warning("%s: %s that %s not %s (the first: %s at byte %d) read as U+FFFD replacement "
                       "characters and scored so (training's reader refuses this file): convert it to %s (e.g. "
                       "iconv -f LATIN1 -t UTF-8 %s > fixed.txt), or leave it out", path, counted(_COUNT.bytes, "byte"),
                       "is" if _COUNT.bytes == 1 else "are", encoding,
                       first.reason, first.start, encoding, path)
    return text
