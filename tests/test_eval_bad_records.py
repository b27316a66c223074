"""A record the evaluation tasks cannot read never sinks a run (a row whose text is no string, a line that is no JSON).

Scored text (``longshort_ppl``, ``longshort_misalignment``): that length scores NaN naming the record and the key
that skips it, from a local file and from a Hugging Face data set (a local folder read by ``datasets``, as the hub's
are); with ``<prefix>_skip_bad_records`` the samples are those of the same data without the record (the reference:
a copy without it). A haystack (passkey, BABILong) is filler and skips such records always. Before, the hub's record
raised ``DataRecordError`` out of lm-eval's task building."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.tasks.ppl.task import long_ppl_dataset  # noqa: E402

BAD = 2  # the record that holds an int where the text goes


def _write(folder: Path, bad: bool) -> Path:
    """Five documents as JSONL in ``folder``, the third an int when ``bad``, left out when not."""
    folder.mkdir(parents=True)
    rows = [{"text": f"document {i}: " + " ".join(f"word{i}_{j}" for j in range(120))} for i in range(5)]
    if bad:
        rows[BAD] = {"text": 12345}
    else:
        del rows[BAD]
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture
def data(tmp_path):
    return _write(tmp_path / "bad", True), _write(tmp_path / "clean", False)


def _sources(folder: Path, prefix: str):
    return {"local": {f"{prefix}_data_files": str(folder / "data.jsonl")},
            "hf": {f"{prefix}_source": "hf", f"{prefix}_dataset_path": str(folder), f"{prefix}_split": "train"}}


@pytest.mark.parametrize("kind", ["local", "hf"])
def test_ppl_names_the_record_or_skips_it(data, sp_tokenizer_dir, kind, caplog):
    bad, clean = data
    kw = dict(tokenizer=str(sp_tokenizer_dir), ppl_max_seq_lengths=[64, 128], ppl_num_samples=4)
    rows = long_ppl_dataset(**_sources(bad, "ppl")[kind], **kw)["test"].to_list()
    assert [r["length"] for r in rows] == [64, 128], rows  # one placeholder per length, the run goes on
    for r in rows:
        assert "field 'text' holds int '12345'" in r["error"] and r["doc_index"] == -1, r
        assert """--metadata '{"ppl_skip_bad_records": true}'""" in r["error"], r
    assert "data.jsonl:3" in rows[0]["error"]  # hf: a folder's record named in its file too, as local data's
    if kind == "hf":  # led by the user's key, as a torn line's refusal: it said "data set '<folder>': ..."
        assert f"ppl_dataset_path in --metadata: {bad / 'data.jsonl'}:3: field 'text'" in rows[0]["error"], rows
    with caplog.at_level(logging.WARNING):
        skipped = long_ppl_dataset(**_sources(bad, "ppl")[kind], **kw, ppl_skip_bad_records=True)["test"].to_list()
    reference = long_ppl_dataset(**_sources(clean, "ppl")[kind], **kw)["test"].to_list()
    assert len(skipped) == 8 and not any(r["error"] for r in skipped)
    assert [r["text"] for r in skipped] == [r["text"] for r in reference]
    assert "skipped an unreadable record (1 so far)" in caplog.text and "holds int '12345'" in caplog.text


@pytest.mark.parametrize("kind", ["local", "hf"])
def test_a_record_without_the_text_field_names_the_tasks_key(tmp_path, sp_tokenizer_dir, kind):
    """The reason names the task's own metadata key: it said "Set text_field" (local) and "Set dataset.text_field"
    (a data set: the recipe config's key)."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "data.jsonl").write_text(json.dumps({"body": "y"}) + "\n")  # a column other than the task reads
    rows = long_ppl_dataset(**_sources(folder, "ppl")[kind], tokenizer=str(sp_tokenizer_dir), ppl_max_seq_lengths=[64],
                            ppl_num_samples=4)["test"].to_list()
    assert "its fields are ['body']. Set ppl_text_field in --metadata to one of them" in rows[0]["error"], rows
    assert "dataset." not in rows[0]["error"]


def test_misalignment_skips_with_its_own_key(data, sp_tokenizer_dir):
    from torchtune_longshort.eval.tasks.common.long_text import samples_from_metadata
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

    bad, clean = data
    meta = {**_sources(bad, "mis")["local"], "tokenizer": str(sp_tokenizer_dir)}
    with pytest.raises(TaskDataError, match=r"data.jsonl:3: .*mis_skip_bad_records"):
        samples_from_metadata(meta, "mis", 64, 3)
    got = samples_from_metadata({**meta, "mis_skip_bad_records": "true"}, "mis", 64, 3)
    ref = samples_from_metadata({**_sources(clean, "mis")["local"], "tokenizer": str(sp_tokenizer_dir)}, "mis", 64, 3)
    assert [s.token_ids for s in got] == [s.token_ids for s in ref]
    with pytest.raises(TaskDataError, match=r"mis_skip_bad_records='maybe': expected true or false"):
        samples_from_metadata({**meta, "mis_skip_bad_records": "maybe"}, "mis", 64, 3)


@pytest.mark.parametrize("prefix", ["ppl", "mis"])
def test_a_torn_line_of_a_hub_source_names_the_tasks_way_on(data, sp_tokenizer_dir, prefix):
    """A data set (``<prefix>_source: hf``, a local folder datasets reads) whose line is torn: the reason advised the
    training recipe's ``torchtune_longshort.data.corpus.local_text (path: them)`` and ``skip_bad_records: True``,
    then ``<prefix>_skip_bad_records``, which datasets' parser never reaches. Now it names the task's own keys, and
    following it (the keys it names, read from the reason) gives the samples of the same data without the line."""
    import re

    from torchtune_longshort.eval.tasks.common.long_text import samples_from_metadata
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

    _, clean = data
    torn = clean.parent / "torn"
    torn.mkdir()
    lines = (clean / "data.jsonl").read_text().splitlines(keepends=True)
    (torn / "data.jsonl").write_text("".join(lines[:2]) + '{"text": "torn\n' + "".join(lines[2:]))
    meta = {**_sources(torn, prefix)["hf"], "tokenizer": str(sp_tokenizer_dir)}
    with pytest.raises(TaskDataError) as refused:
        samples_from_metadata(meta, prefix, 64, 3)
    said = str(refused.value)
    assert "data.jsonl:3: not a JSON line" in said and "local_text" not in said and "(path: them)" not in said, said
    files_key, skip_key = re.search(r"read the same files with (\w+)=<them> in --metadata .* with (\w+): true", said
                                    ).groups()
    got = samples_from_metadata({files_key: str(torn), skip_key: True, "tokenizer": str(sp_tokenizer_dir)}, prefix,
                                64, 3)
    ref = samples_from_metadata({**_sources(clean, prefix)["local"], "tokenizer": str(sp_tokenizer_dir)}, prefix, 64, 3)
    assert [s.token_ids for s in got] == [s.token_ids for s in ref]
    assert "(or skip such records" not in said, said  # not also told to skip with a key that does not reach it


def test_haystacks_skip_an_unreadable_record(data, monkeypatch):
    from torchtune_longshort.data import corpus
    from torchtune_longshort.eval.tasks.babilong.haystack import iter_haystack_lines
    from torchtune_longshort.eval.tasks.passkey.task import haystack_units

    bad, clean = data
    assert haystack_units("local", str(bad / "data.jsonl")) == haystack_units("local", str(clean / "data.jsonl"))
    real_pg19 = corpus.pg19

    def pg19_from(folder):  # PG19 itself needs the hub: the same reader on a local folder in its format
        return lambda split, **kw: real_pg19(str(folder), split="train", **kw)

    def lines(folder, n=4):
        monkeypatch.setattr(corpus, "pg19", pg19_from(folder))
        it = iter_haystack_lines("pg19")
        return [next(it) for _ in range(n)]

    assert lines(bad) == lines(clean)


def test_ppl_reads_parquet_rows_and_names_a_compressed_file(data, sp_tokenizer_dir):
    # a .parquet or .jsonl.gz file was decoded with replacement characters and scored (ppl 579.7 of gibberish)
    import gzip

    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    _, clean = data
    rows = [json.loads(line) for line in (clean / "data.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), clean / "data.parquet")
    (clean / "data.jsonl.gz").write_bytes(gzip.compress((clean / "data.jsonl").read_bytes()))
    kw = dict(tokenizer=str(sp_tokenizer_dir), ppl_max_seq_lengths=[64, 128], ppl_num_samples=4)
    from_parquet = long_ppl_dataset(ppl_data_files=str(clean / "data.parquet"), **kw)["test"].to_list()
    reference = long_ppl_dataset(ppl_data_files=str(clean / "data.jsonl"), **kw)["test"].to_list()
    assert len(reference) == 8 and [r["text"] for r in from_parquet] == [r["text"] for r in reference]
    rows = long_ppl_dataset(ppl_data_files=str(clean / "data.jsonl.gz"), **kw)["test"].to_list()
    assert [r["length"] for r in rows] == [64, 128] and all(r["doc_index"] == -1 for r in rows)
    assert all("data.jsonl.gz: a gzip-compressed file, not text: decompress it first" in r["error"] for r in rows)


def test_a_split_the_data_set_lacks_names_the_setting(data, sp_tokenizer_dir):
    # datasets' "Bad split: dev. Available splits: ['train']" named no setting: ppl_split or the training config's
    from torchtune_longshort.data import corpus
    from torchtune_longshort.data.source_names import SourceNames, source_names

    _, clean = data
    kw = dict(tokenizer=str(sp_tokenizer_dir), ppl_max_seq_lengths=[64], ppl_num_samples=2)
    with pytest.raises(ValueError, match=r"split 'dev' \(ppl_split in --metadata\) is not a split of .*Available "
                                         r"splits: \['train'\]"):  # a setting's error: refused, as a key no task reads
        long_ppl_dataset(ppl_source="hf", ppl_dataset_path=str(clean), ppl_split="dev", **kw)
    with source_names(SourceNames("validation.dataset")), pytest.raises(
            ValueError, match=r"split 'dev' \(validation.dataset.split\) is not a split of .*Available splits: "):
        corpus.hf_text(str(clean), split="dev")


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_an_empty_data_file_is_named_as_empty(tmp_path, sp_tokenizer_dir, content):
    """An empty (or blank) ``.jsonl`` as ``ppl_data_files``: the length's reason said "no document of 64 characters or
    more", as if the file held short documents; it names the file and says it holds no records."""
    f = tmp_path / "empty.jsonl"
    f.write_bytes(content)
    rows = long_ppl_dataset(ppl_data_files=str(f), tokenizer=str(sp_tokenizer_dir), ppl_max_seq_lengths=[128],
                            ppl_num_samples=2)["test"].to_list()
    assert len(rows) == 1 and rows[0]["doc_index"] == -1, rows
    assert f"ppl_data_files in --metadata: {f} holds no records (an empty file)" in rows[0]["error"], rows
    assert "characters or more" not in rows[0]["error"], rows
