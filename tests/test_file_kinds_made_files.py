""":func:`not_text` names each kind of file by the first bytes the library that makes it writes (gzip, bz2, lzma,
zipfile, pyarrow; zstd by its frame's magic number, RFC 8878), a byte-order mark by :mod:`codecs`' own, reads UTF-16
and UTF-32 in any spelling of the encoding's name, and finds a NUL byte past the first few; the data-file suffixes
are the ones ``datasets`` itself maps to the text, JSON, CSV, Parquet and Arrow builders."""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import lzma
import struct
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets.packaged_modules import _EXTENSION_TO_MODULE

from torchtune_longshort.data.file_kinds import data_file_suffixes, not_text, record_suffixes

TEXT = "one line of a book\n" * 4


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("book.txt", TEXT)
    return buf.getvalue()


def _parquet() -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": [TEXT]}), buf)
    return buf.getvalue()


def _arrow() -> bytes:
    buf = io.BytesIO()
    table = pa.table({"text": [TEXT]})
    with pa.ipc.new_file(buf, table.schema) as w:
        w.write_table(table)
    return buf.getvalue()


MADE = {
    "gzip": lambda: gzip.compress(TEXT.encode()),
    "bzip2": lambda: bz2.compress(TEXT.encode()),
    "xz": lambda: lzma.compress(TEXT.encode()),
    "zstd": lambda: struct.pack("<I", 0xFD2FB528) + b"\x00" * 8,  # RFC 8878: a frame starts with 0xFD2FB528, LE
    "zip": _zip,
    "Parquet": _parquet,
    "Arrow": _arrow,
}


@pytest.mark.parametrize("kind", sorted(MADE))
def test_a_file_made_by_its_library_is_named_by_its_kind(kind):
    said = not_text(MADE[kind]())
    assert said is not None and kind in said, said


@pytest.mark.parametrize("bom", [codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE])
def test_utf16_with_either_byte_order_mark_is_named_utf16(bom):
    data = bom + TEXT.encode("utf-16-le" if bom == codecs.BOM_UTF16_LE else "utf-16-be")
    said = not_text(data)
    assert said is not None and "UTF-16" in said, said


@pytest.mark.parametrize("encoding", ["utf-16", "UTF-16", "utf_16", "utf-32", "UTF-32", "U32", "utf_32_le"])
def test_text_in_a_wide_encoding_is_text_whatever_the_names_spelling(encoding):
    assert not_text(TEXT.encode(encoding), encoding) is None


def test_a_nul_byte_past_the_first_few_is_binary():
    said = not_text(TEXT.encode() + b"\x00")
    assert said is not None and "NUL" in said, said


def test_the_data_file_suffixes_are_datasets_own_for_the_builders_read():
    builders = {s: _EXTENSION_TO_MODULE[s][0] for s in data_file_suffixes()}  # a suffix datasets lacks: KeyError
    assert set(builders.values()) == {"text", "json", "csv", "parquet", "arrow"}, builders
    records = {_EXTENSION_TO_MODULE[s][0] for s in record_suffixes()}
    assert records == {"json", "parquet"}, records


def test_a_magic_number_inside_the_text_is_no_kind_of_file():
    # only a file's first bytes say its kind: a book may mention "PAR1", "BZh" or "ARROW1" anywhere else
    assert not_text(b"chapter one: the PAR1 meeting, BZh hums, ARROW1 flies\n") is None


@pytest.mark.parametrize("kind", ["gzip", "bzip2", "xz", "zstd"])
def test_a_compressed_file_is_told_every_record_suffix_datasets_reads(kind):
    # a hand-kept list said "(the reader takes text, .jsonl, .json and .parquet files)": a user who decompressed to
    # *.ndjson or *.gpq was told the reader does not take it
    import re

    said = not_text(MADE[kind]())
    named = set(re.findall(r"\.\w+", said.split("decompress it first", 1)[1]))
    expected = {s for s, (builder, _) in _EXTENSION_TO_MODULE.items() if builder in ("json", "parquet")}
    assert {".ndjson", ".geoparquet", ".gpq"} <= expected and named == expected, said
