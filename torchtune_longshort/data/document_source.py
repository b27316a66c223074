"""The document source every loader of :mod:`~torchtune_longshort.data.corpus` returns (:class:`DocumentSource`: a
named, re-iterable callable, with random access where the source has it), and which documents a source yields
(:func:`kept`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from torchtune_longshort.data.data_files import cache_problem
from torchtune_longshort.data.file_paths import file_digests
from torchtune_longshort.data.resume_reading import Earlier
from torchtune_longshort.data.source_names import current_names
from torchtune_longshort.data.text_files import DataSourceError, SkippedRecord


def kept(doc: Any) -> bool:
    """Whether a source yields ``doc``: an empty or whitespace-only text is no document (it would add a BOS / EOS
    pair alone); a skipped record keeps its place (a position counts it)."""
    return isinstance(doc, SkippedRecord) or bool(doc.strip())


class DocumentSource:
    """A named, re-iterable document source (a callable with a readable repr for logs and errors); ``files``: the
    files it reads, where it reads whole files (the recipe warns when validation and training share one); ``count``:
    its number of documents where it can read any of them without reading those before (random access: a map-style
    dataset, the stdlib's files), ``read`` then taking the indices to read, in that order (:meth:`from_index`, which
    a resumed stream uses, and :meth:`in_order`, which a shuffled stream uses). ``earlier_reading``: how versions
    before each ``reading`` mark of the data state (:data:`~.resume_reading.DATA_READING`) read this source otherwise
    (``{mark: a clause after "which", or a callable of the saved state giving one}``), so that a resume of a run
    they saved is refused naming the change, not the user's data (:func:`~.resume_reading.check_resumable`);
    ``earlier_text`` likewise, for a change within documents (each where it was): said in a warning."""

    def __init__(self, fn: Callable[[], Iterable[Any]], description: str, files: Optional[Sequence[Any]] = None,
                 count: Optional[int] = None, read: Optional[Callable[[Sequence[int]], Iterable[Any]]] = None,
                 earlier_reading: Earlier = None, fingerprinted: bool = False, earlier_text: Earlier = None,
                 file_of: Optional[Sequence[int]] = None):
        if (count is None) != (read is None):
            raise ValueError("a source with random access gives both count and read")
        self._fn = fn
        self._read = read
        self.description = description
        self.files = None if files is None else tuple(files)
        self.count = count
        self.where = current_names().where
        self.earlier_reading, self.earlier_text = earlier_reading, earlier_text
        self.file_of = file_of  # each document's index into files (a resume names what an edited file affects)
        self._fingerprinted, self._digests = fingerprinted, None

    def digests(self) -> Optional[bytes]:
        """``fingerprinted`` (a source that reads its ``files`` whole): their :func:`file_digests`, read once, which
        the data state keeps so that a resume on edited text is said; None otherwise."""
        if self._fingerprinted and self._digests is None:
            self._digests = file_digests(self.files)
        return self._digests

    def __call__(self) -> Iterator[str]:
        return self._reading(self._fn())

    def in_order(self, indices: Sequence[int]) -> Iterator[Any]:
        """The documents at ``indices`` (each in ``[0, count)``), in that order; the others neither read nor built."""
        if self.count is None:
            raise ValueError(f"{self!r} has no random access: it is read in order")
        return self._reading(self._read(indices))

    def from_index(self, start: int) -> Iterator[Any]:
        """The documents from index ``start`` (``0 <= start <= count``) on, those before neither read nor built."""
        if self.count is None or not 0 <= start <= self.count:
            raise ValueError(f"{self!r}: cannot start at document {start} (count {self.count})")
        return self.in_order(range(start, self.count))

    def __repr__(self) -> str:
        return f"<documents: {self.description}>"

    def _reading(self, docs: Iterable[Any]) -> Iterator[Any]:
        """``docs``, a file that can no longer be read (deleted, moved, unmounted since the source was built) a
        :class:`DataSourceError` naming it: the recipe saves the last good step and says to resume once it can be
        read again (it was a bare ``[Errno 2]`` line, the steps since the last periodic save lost)."""
        try:
            yield from docs
        except OSError as e:
            if e.filename is None or isinstance(e, ConnectionError):  # no file of ours (a hub source says its own)
                raise
            cache = cache_problem(e)  # a library's own folder (a hub source's token file under HOME=<a file>)
            if cache:
                raise DataSourceError(f"{self.where} {self.description}: {cache}") from e
            raise DataSourceError(f"{self.where} {self.description}: {e.filename} can no longer be read "
                                  f"({e.strerror or type(e).__name__}; read as the run went on)") from e
