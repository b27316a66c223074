"""The hub loaders (``pg19``, ``redpajama_book``, ``hf_text``) against what the hub and ``datasets`` >= 4 really serve:
``deepmind/pg19`` and ``togethercomputer/RedPajama-Data-1T`` are loading scripts, which ``datasets`` no longer runs
(and the latter took its book subset down), so the defaults must name data files; a source ``datasets`` cannot open,
or a local file it cannot parse, is refused in one line naming the way on, or the file and line. Offline: the hub is
played by a stand-in ``load_dataset`` that serves records in each data set's own format."""

from __future__ import annotations

import json

import datasets
import pytest

from torchtune_longshort.data import corpus
from torchtune_longshort.data.data_files import named_files
from torchtune_longshort.data.text_files import DataRecordError

# The hub as it stands (dataset pages, 2025): repositories that hold a loading script (refused by datasets >= 4),
# and PG19's Parquet copy with deepmind/pg19's fields and splits.
SCRIPT_REPOSITORIES = {"deepmind/pg19": "pg19.py", "togethercomputer/RedPajama-Data-1T": "RedPajama-Data-1T.py"}
PG19_ROWS = {split: [{"short_book_title": f"Book {i}", "publication_date": 1900 + i, "url": f"http://x/{i}",
                      "text": f"{split} book {i} text"} for i in range(3)] for split in ("train", "validation", "test")}


@pytest.fixture
def hub(monkeypatch):
    """``datasets.load_dataset`` as the hub answers it: a script repository raises datasets' own error, the Parquet
    copy of PG19 serves its rows, local builders (``json``) go to the real ``load_dataset``."""
    real, calls = datasets.load_dataset, []

    def load_dataset(path, name=None, split=None, **kwargs):
        calls.append(path)
        if path in SCRIPT_REPOSITORIES:
            raise RuntimeError(f"Dataset scripts are no longer supported, but found {SCRIPT_REPOSITORIES[path]}")
        if path == "emozilla/pg19":
            return iter(PG19_ROWS[split])
        return real(path, name, split=split, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_pg19_reads_a_copy_datasets_can_load(hub):
    for split in ("train", "validation", "test"):  # the shipped configs validate on "validation", BABILong uses "test"
        assert list(corpus.pg19(split=split)()) == [r["text"] for r in PG19_ROWS[split]]
    assert "deepmind/pg19" not in hub


def test_a_loading_script_repository_is_refused_in_one_line(hub, tmp_path):
    with pytest.raises(ValueError, match=r"'deepmind/pg19' .*RuntimeError: Dataset scripts are no longer supported, "
                                         r"but found pg19.py\): .*loading script.*\(PG19: emozilla/pg19\)"):
        corpus.pg19("deepmind/pg19")
    folder = tmp_path / "pg19"  # the real load_dataset (the stand-in passes it on) on a repository with a script
    folder.mkdir()
    (folder / "pg19.py").write_text("import datasets\n")
    with pytest.raises(ValueError, match=r"found pg19.py\): its hub repository is a loading script"):
        corpus.hf_text(str(folder))


def test_an_unreachable_hub_read_unchecked_is_refused_as_at_build(monkeypatch):
    """tune run ... dataset._component_=...corpus.hf_text dataset.source=emozilla/pg19-test dataset.check_first=False
    with the hub out of reach (HF_ENDPOINT=http://127.0.0.1:9) ended in datasets' ConnectionError traceback, exit 1,
    when the recipe first read the data; the first read now says what check_first=True says at build (the
    reference: that line), as a DataSourceError: one line and exit 2 at the start, the last good step saved mid-run."""
    from torchtune_longshort.data.text_files import DataSourceError

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'emozilla/pg19-test' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(ValueError) as at_build:
        corpus.hf_text("emozilla/pg19-test")
    documents = corpus.hf_text("emozilla/pg19-test", check_first=False)
    with pytest.raises(DataSourceError) as at_read:
        next(iter(documents()))
    assert str(at_read.value) == str(at_build.value)
    assert "the hub cannot be reached from here" in str(at_read.value)


def test_an_unreachable_hub_is_refused_in_one_line(monkeypatch):
    said = {"error": "Couldn't reach 'emozilla/pg19' on the Hub (LocalEntryNotFoundError)"}

    def offline(*args, **kwargs):
        raise ConnectionError(said["error"])

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match=r"'emozilla/pg19' .*ConnectionError.*: the hub cannot be reached from here"
                                         r".*or from local files \(source: json, data_files: ...\)$"):
        corpus.pg19()
    # offline mode set by the user (datasets' OfflineModeIsEnabled): it was told to set HF_DATASETS_OFFLINE=1; the
    # line names the variable that is set (61c708b)
    said["error"] = "Couldn't reach 'emozilla/pg19' on the Hub (OfflineModeIsEnabled)"
    for name in ("HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"\(OfflineModeIsEnabled\)\): offline mode is on \(HF_HUB_OFFLINE=1\) "
                                         r"and the Hugging Face cache holds no copy of it: run "
                                         r"once with network access .*or read local files \(source: json, ") as err:
        corpus.pg19()
    assert "(HF_DATASETS_OFFLINE=1)" not in str(err.value)
    said["error"] = "Couldn't reach 'nosuchuser/nosuchdataset' on the Hub (LocalEntryNotFoundError)"
    # longshort-misalignment's --data: the way to local files in its own words, not a config's keys (an audit)
    from torchtune_longshort.data.source_names import source_names
    from torchtune_longshort.metrics.cli import SOURCE_NAMES

    with source_names(SOURCE_NAMES), pytest.raises(ValueError) as err:
        corpus.hf_text("nosuchuser/nosuchdataset", split="test")
    said = str(err.value)
    assert said.startswith("--data 'nosuchuser/nosuchdataset' ") and "or from a local file or folder as --data" in said
    assert "source: json" not in said, said

    def missing(*args, **kwargs):
        raise RuntimeError("no such split")

    monkeypatch.setattr(datasets, "load_dataset", missing)
    with source_names(SOURCE_NAMES), pytest.raises(ValueError, match=r"check --data and --split, or read a local"):
        corpus.hf_text("user/data", split="tset")
    with pytest.raises(ValueError, match=r"check dataset.source, dataset.name and dataset.split, or read local files"):
        corpus.hf_text("user/data", split="tset")


def test_redpajama_book_reads_files_in_its_format_and_refuses_the_taken_down_subset(hub, tmp_path):
    rows = [{"text": f"book {i} " * 5, "meta": {"title": f"t{i}"}, "red_pajama_subset": "book"} for i in range(4)]
    f = tmp_path / "book.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert list(corpus.redpajama_book(data_files=str(f))()) == [r["text"] for r in rows]
    for kwargs in ({}, {"source": "togethercomputer/RedPajama-Data-1T", "name": "book"}):
        with pytest.raises(ValueError, match=r"redpajama_book needs dataset.data_files: .*book subset .*"
                                             r"hf://datasets/togethercomputer/RedPajama-Data-1T-Sample/book_sample"):
            corpus.redpajama_book(**kwargs)
    assert set(hub) == {"json"}  # the 1T repository is never asked


@pytest.mark.parametrize("bad, said", [(b'{"text": "torn\n', "not a JSON line"),
                                       (b'{"text": "bad \xff byte"}\n', "bytes that are not utf-8")])
def test_a_local_record_datasets_cannot_parse_is_named_by_file_and_line(tmp_path, bad, said):
    f = tmp_path / "books.jsonl"
    f.write_bytes(b"".join(json.dumps({"text": f"book {i}"}).encode() + b"\n" for i in range(3)) + bad)
    with pytest.raises(DataRecordError, match=rf"books.jsonl:4: {said}"):
        list(corpus.hf_text("json", data_files=str(f))())
    # datasets' parser stops there: skip_bad_records cannot pass it, and the recipe's message must not advise it
    # (it did: "mend the record (or skip it: dataset.skip_bad_records=True)")
    with pytest.raises(DataRecordError, match=rf"books.jsonl:4: {said}") as caught:
        list(corpus.hf_text("json", data_files=str(f), skip_bad_records=True)())
    assert caught.value.skippable is False
    f.write_bytes(f.read_bytes()[: -len(bad)] + b'{"body": "no text"}\n')  # a record read, its text missing
    with pytest.raises(DataRecordError, match="field 'text' holds NoneType") as caught:
        list(corpus.hf_text("json", data_files=str(f))())
    assert caught.value.skippable is True
    assert [type(d).__name__ for d in corpus.hf_text("json", data_files=str(f), skip_bad_records=True)()] == \
        ["str", "str", "str", "SkippedRecord"]


def test_remote_data_files_are_not_checked_as_local_paths(tmp_path):
    local = tmp_path / "a.jsonl"
    local.write_text('{"text": "x"}\n')
    remote = corpus.REDPAJAMA_BOOK_SAMPLE
    assert named_files({"data_files": remote}, "dataset") == []
    assert named_files({"data_files": [remote, str(local)]}, "dataset") == [("dataset.data_files", local)]
    with pytest.raises(FileNotFoundError, match="dataset.data_files='.*nope.jsonl' does not exist"):
        named_files({"data_files": [remote, str(tmp_path / "nope.jsonl")]}, "dataset")


def test_a_local_parquet_copy_is_accepted_as_the_source(tmp_path):
    """A snapshot of PG19's Parquet copy on disk (``data/train-*.parquet``, its fields): the config check must not
    refuse the folder that ``datasets`` reads (it listed only JSON and text files), and a corrupt Parquet file is
    named as a file, not read again as text ("bytes that are not utf-8")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "pg19" / "data").mkdir(parents=True)
    rows = [{**row, "text": row["text"] * 50} for row in PG19_ROWS["train"]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pg19" / "data" / "train-00000-of-00001.parquet")
    args = {"source": str(tmp_path / "pg19"), "split": "train"}
    assert [f.name for _, f in named_files(args, "dataset")] == ["train-00000-of-00001.parquet"]
    assert list(corpus.pg19(str(tmp_path / "pg19"))()) == [r["text"] for r in rows]
    # the text column under another name, as the refusal of a copy without 'text' tells (it raised TypeError:
    # hf_text() got multiple values for keyword argument 'text_field')
    pq.write_table(pa.Table.from_pylist([{"body": "b" * 99}]), tmp_path / "body.parquet")
    assert list(corpus.pg19("parquet", data_files=str(tmp_path / "body.parquet"), text_field="body")()) == ["b" * 99]
    assert list(corpus.redpajama_book(str(tmp_path / "body.parquet"), source="parquet", text_field="body")()) == [
        "b" * 99]
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really \xff parquet")
    with pytest.raises(ValueError, match=r"broken.parquet\) could not be loaded") as caught:
        list(corpus.hf_text("parquet", data_files=str(broken))())
    assert not isinstance(caught.value, DataRecordError)


def test_a_stream_that_breaks_mid_run_saves_the_last_good_step(hub, monkeypatch, tmp_path, tiny_llama2_dir,
                                                               sp_tokenizer_dir):
    """The hub dropping mid-run: ``datasets`` retries a streamed read, then raises ``ConnectionError("Server
    Disconnected")`` (``file_utils.read_with_retries``). It ended the run with a traceback, the steps since the last
    save lost; now the last good step is saved and the line says to resume once the source can be read, as for a
    bad record, and the resumed run reads on from there."""
    from recipe_config import make_cfg, train_until_fault

    from torchtune_longshort.data.text_files import DataSourceError
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    rows = [{"text": "".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n" for j in range(12))} for i in range(40)]
    served = {"until": 3}
    real = datasets.load_dataset

    def load_dataset(path, name=None, split=None, **kwargs):
        if path != "books/stream":
            return real(path, name, split=split, **kwargs)

        def stream():
            for i, row in enumerate(rows):
                if i == served["until"]:
                    raise ConnectionError("Server Disconnected")
                yield row
        return stream()

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    node = {"_component_": "torchtune_longshort.data.corpus.hf_text", "source": "books/stream"}
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=8, batch_size=2,
                   save_every_n_steps=100, dataset=node)
    run = LongShortFinetuneRecipe(cfg)
    run.setup()
    stopped = train_until_fault(run, DataSourceError, r"reading stopped after its first 3 records \(ConnectionError: "
                                r"Server Disconnected\).*The last good step is saved: .*step_(\d+); once the source "
                                r"can be read again, continue with resume=True", tmp_path / "out")
    assert 1 <= stopped < 8
    served["until"] = len(rows)  # the hub is back
    resumed = LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=8,
                                               batch_size=2, save_every_n_steps=100, dataset=node, resume=True))
    resumed.setup()
    resumed.train()
    resumed.cleanup()
    assert (tmp_path / "out" / "step_8").is_dir()


@pytest.mark.parametrize("where", ["dataset", "validation.dataset"])
def test_the_config_check_refuses_redpajama_book_without_its_files_as_its_build_does(where, tmp_path):
    # longshort-validate said OK to a shipped redpajama_book config left without dataset.data_files; tune run then
    # refused it once the model had loaded. The reference is the builder's own refusal.
    from omegaconf import OmegaConf

    from torchtune_longshort.config.fields import build_section
    from torchtune_longshort.data.source_names import SourceNames, source_names
    from torchtune_longshort.training.recipe_config.data import DataSourceConfig

    for args in ({}, {"source": corpus.REDPAJAMA_1T, "data_files": "x.jsonl"}):
        with source_names(SourceNames(where)), pytest.raises(ValueError) as built:
            corpus.redpajama_book(**args)
        node = OmegaConf.create({"_component_": "torchtune_longshort.data.corpus.redpajama_book", **args})
        with pytest.raises(ValueError) as checked:
            build_section(DataSourceConfig, OmegaConf.to_container(node), where)
        assert str(checked.value) == str(built.value) and f"{where}.data_files" in str(checked.value)
    f = tmp_path / "b.jsonl"
    f.write_text('{"text": "a book"}\n')
    node = {"_component_": "torchtune_longshort.data.corpus.redpajama_book", "data_files": str(f)}
    build_section(DataSourceConfig, node, where)  # named files: no refusal
