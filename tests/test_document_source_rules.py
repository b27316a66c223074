"""DocumentSource's own rules that hand mutation testing found unasked: random access is ``count`` and ``read``
together (either alone refused), a connection error stays the hub library's own even when it names a file (it is no
file of the source's that can no longer be read), as does an error naming no file, and the fingerprint of the files
is read once (the files the run started on, not an edit made since). References: the class docstring's rules,
errno's connection errors, the files' own bytes before the edit."""

import errno
import os

import pytest

from torchtune_longshort.data.document_source import DocumentSource
from torchtune_longshort.data.text_files import DataSourceError


def _docs():
    return iter(["a b"])


@pytest.mark.parametrize("given", [{"count": 1}, {"read": lambda indices: iter(["a b"])}])
def test_random_access_is_count_and_read_together(given):
    with pytest.raises(ValueError, match="^a source with random access gives both count and read$"):
        DocumentSource(_docs, "docs", **given)


@pytest.mark.parametrize("code", [errno.ECONNRESET, errno.ECONNREFUSED])
def test_a_connection_error_naming_a_file_is_raised_as_it_is(code):
    def failing():
        yield "a b"
        raise ConnectionError(code, os.strerror(code), "/hub/socket")

    docs = DocumentSource(failing, "hub docs")()
    assert next(docs) == "a b"
    with pytest.raises(ConnectionError) as raised:
        next(docs)
    assert not isinstance(raised.value, DataSourceError) and raised.value.errno == code


def test_an_os_error_naming_no_file_is_raised_as_it_is():
    def failing():
        raise OSError(errno.EIO, os.strerror(errno.EIO))
        yield

    with pytest.raises(OSError) as raised:
        next(DocumentSource(failing, "docs")())
    assert not isinstance(raised.value, DataSourceError) and raised.value.errno == errno.EIO


def test_a_file_no_longer_readable_is_named_as_the_sources():
    def failing():
        yield "a b"
        open("/nonexistent/gone.txt")

    docs = DocumentSource(failing, "local docs")()
    next(docs)
    with pytest.raises(DataSourceError, match=r"local docs: /nonexistent/gone.txt can no longer be read"):
        next(docs)


def test_the_files_fingerprint_is_read_once(tmp_path):
    """``digests`` is the files as first read: an edit since is what a resume compares against, not hidden by it."""
    path = tmp_path / "a.txt"
    path.write_text("first text\n")
    source = DocumentSource(_docs, "files", files=[path], fingerprinted=True)
    before = source.digests()
    path.write_text("an edited text, longer\n")
    assert DocumentSource(_docs, "files", files=[path], fingerprinted=True).digests() != before  # the edit is seen
    assert source.digests() == before
