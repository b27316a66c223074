"""A torn JSON line in a local folder read through ``datasets`` (``hf_text``; the evaluation's ``<prefix>_source:
hf``) stops datasets' parser, which no skipping reaches: the reason says which skipping does not reach it in the
caller's own key. Before, it said "(skip_bad_records does not reach it)", the training component's argument, to an
evaluation user whose key is ``ppl_skip_bad_records`` and a recipe user whose is ``validation.dataset....``. The
reference: ``json.loads`` refuses the line, and the key the reason names, turned on, is still refused."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from torchtune_longshort.data import corpus
from torchtune_longshort.data.source_names import SourceNames, source_names
from torchtune_longshort.data.text_files import DataRecordError
from torchtune_longshort.eval.tasks.common.long_text import texts_from_metadata
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

TORN = '{"text": "torn'


@pytest.fixture
def corp(tmp_path):
    lines = [json.dumps({"text": f"book {i} " * 8}) for i in range(3)] + [TORN]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(json.JSONDecodeError):
        json.loads(TORN)
    return tmp_path


def _not_reached(said):
    return re.search(r"datasets' parser stops at it \((\S+)(?: in --metadata)? does not reach it[):]", said).group(1)


@pytest.mark.parametrize("prefix", ["ppl", "mis"])
def test_the_evaluation_names_its_own_skip_key(corp, prefix):
    meta = {f"{prefix}_source": "hf", f"{prefix}_dataset_path": str(corp), f"{prefix}_split": "train"}
    with pytest.raises(TaskDataError) as refused:
        list(texts_from_metadata(meta, prefix))
    key = _not_reached(str(refused.value))
    assert key == f"{prefix}_skip_bad_records", str(refused.value)
    # it started "data set: ...", where every other refusal starts with the user's own key
    assert str(refused.value).startswith(f"{prefix}_dataset_path in --metadata: "), str(refused.value)
    with pytest.raises(TaskDataError, match="a.jsonl:4: not a JSON line"):  # turned on, it does not reach the line
        list(texts_from_metadata({**meta, key: True}, prefix))


@pytest.mark.parametrize("section", ["dataset", "validation.dataset"])
def test_the_recipe_names_the_section_s_skip_key(corp, section):
    def read(**kw):
        with source_names(SourceNames(section)):
            return list(corpus.hf_text("json", data_files=str(corp / "a.jsonl"), check_first=False, **kw)())

    with pytest.raises(DataRecordError) as refused:
        read()
    key = _not_reached(str(refused.value))
    assert key == f"{section}.skip_bad_records", str(refused.value)
    with pytest.raises(DataRecordError, match="a.jsonl:4: not a JSON line"):
        read(skip_bad_records=True)


def _passkey(where):
    from torchtune_longshort.eval.tasks.passkey.task import haystack_units

    if where is not None:  # the way the reason names: the task's own reader, which skips the torn line
        return haystack_units("local", data_files=str(where))
    return haystack_units("pg19")


def _babilong(where):
    from torchtune_longshort.eval.tasks.babilong.haystack import iter_haystack_lines

    return list(zip(range(3), iter_haystack_lines("pg19", label="--haystack")))


@pytest.mark.parametrize("read, key", [(_passkey, "passkey_haystack"), (_babilong, "--haystack")])
def test_a_hub_haystack_names_the_key_the_user_set(corp, monkeypatch, read, key):
    # a hub haystack (pg19) that datasets finds as a local folder: it said the training component's words,
    # "(skip_bad_records does not reach it) ... torchtune_longshort.data.corpus.local_text (path: them)"
    from torchtune_longshort.data.hf_loading import PG19_SOURCE
    from torchtune_longshort.eval.tasks.common.long_text import HF_PRESETS

    folder = corp / (HF_PRESETS["pg19"][0] if read is _passkey else PG19_SOURCE)
    folder.mkdir(parents=True)
    (corp / "a.jsonl").rename(folder / "test.jsonl")
    monkeypatch.chdir(corp)
    with pytest.raises(TaskDataError) as refused:
        read(None)
    said = str(refused.value)
    assert said.startswith(f"{key}: "), said  # not "data set: "
    assert "test.jsonl:4: not a JSON line" in said and f"({key}'s own skipping of unreadable records does not " \
        "reach it)" in said and "local_text" not in said and "dataset." not in said, said
    books = [(f"book {i} " * 8).strip() for i in range(3)]
    if read is _passkey:
        assert said.split("or read the same files with ")[1].startswith(key), said
        assert read(folder / "test.jsonl") == books  # torn line skipped
        return
    # it said "read the same files with --haystack <their text as .txt files> (read whole, no record parsed)": the
    # local haystack reads .txt files alone; the way named reads the books saved so
    assert said.endswith(": mend the file, or save the books' text as .txt files and name them: --haystack <a .txt "
                         "file, a folder of them or a glob> (each file read whole as one text)"), said
    for i, book in enumerate(books):
        (corp / f"book{i}.txt").write_text(book)
    from torchtune_longshort.eval.tasks.babilong.haystack import iter_haystack_lines

    assert list(zip(range(3), iter_haystack_lines(str(corp), label="--haystack"))) == list(enumerate(books))


@pytest.mark.parametrize("section, by", [("dataset", "file"), ("validation.dataset", "file"), ("dataset", "folder"),
                                         ("validation.dataset", "glob"), ("dataset", "split_folder")])
def test_a_torchtune_builder_names_the_section_s_key_and_a_way_that_reads_the_file(corp, section, by):
    # it said "(skip_bad_records does not reach it) ... local_text (path: them), which ... skip_bad_records: True":
    # no section, and keys the builder's node does not take (source, data_files, column stay and are refused)
    from argparse import Namespace

    from omegaconf import OmegaConf
    from torchtune.config._utils import _merge_yaml_and_cli_args
    from torchtune.datasets import text_completion_dataset

    from torchtune_longshort.config.fields import build_section
    from torchtune_longshort.data.torchtune_datasets import build_torchtune_dataset
    from torchtune_longshort.training.data_setup import build_documents
    from torchtune_longshort.training.recipe_config.data import DataSourceConfig

    books = corp / "my books"  # a space in a folder's name: the override, pasted into a shell, broke in two
    books.mkdir()
    (corp / "a.jsonl").rename(books / "a.jsonl")
    args = {"source": "json", "data_files": str(books / "a.jsonl"), "column": "text", "split": "train"}
    texts = [(f"book {i} " * 8) for i in range(3)]
    if by == "split_folder":  # datasets reads train.jsonl alone for split 'train': the way read test.jsonl too
        (books / "a.jsonl").rename(books / "train.jsonl")
        (books / "test.jsonl").write_text(json.dumps({"text": "held out " * 8}) + "\n")
        args = {"source": str(books), "column": "text", "split": "train"}
    elif by != "file":  # it named every file of the folder or glob: dataset.path=[.../a.jsonl,.../b.jsonl,...]
        texts.append("book 3 " * 8)
        (books / "b.jsonl").write_text(json.dumps({"text": texts[-1]}) + "\n")
        args = ({"source": str(books), "column": "text", "split": "train"} if by == "folder" else
                {**args, "data_files": str(books / "*.jsonl")})
    with pytest.raises(DataRecordError) as refused:
        build_torchtune_dataset(text_completion_dataset, None, args, section)
    said = str(refused.value)
    assert _not_reached(said) == f"{section}.skip_bad_records", said
    assert "the builder hands the whole file to that parser, which skips nothing" in said, said
    way = shlex.split(said.split("or read the same files with ")[1])  # as the shell hands it to tune run
    named = {"file": books / "a.jsonl", "folder": books, "glob": books / "*.jsonl",
             "split_folder": books / "train.jsonl"}[by]
    assert f"{section}.path={named}" in way, way
    yaml = OmegaConf.create({})
    OmegaConf.update(yaml, section, {"_component_": "torchtune.datasets.text_completion_dataset", **args},
                     force_add=True)
    node = OmegaConf.select(_merge_yaml_and_cli_args(Namespace(**OmegaConf.to_container(yaml)), way), section)
    source = build_section(DataSourceConfig, OmegaConf.to_container(node), section)
    assert [d for d in build_documents(source, None, section)() if isinstance(d, str)] == \
        texts  # the named way reads the same books, the torn line skipped
    if by != "file":
        return

    torn_array = corp / "a.json"  # one record to every reader: skipping it drops the file, so no skipping way
    torn_array.write_text("[\n" + json.dumps({"text": "book"}) + ",\n" + TORN + "\n")
    with pytest.raises(DataRecordError) as refused:
        build_torchtune_dataset(text_completion_dataset, None, {**args, "data_files": str(torn_array)}, section)
    assert str(refused.value).endswith("a.json:3: not JSON (Invalid control character at): datasets' parser stops "
                                       f"at it ({section}.skip_bad_records does not reach it: the builder hands the "
                                       "whole file to that parser, which skips nothing): mend the file"), \
        str(refused.value)


def test_a_builder_s_way_on_is_none_for_another_layout_and_never_removes_the_skip_key(tmp_path):
    """No local_text way for a builder with no text column (chat_dataset's messages: local_text reads a text field),
    and the way on sets dataset.skip_bad_records=True without also removing it (~dataset.skip_bad_records)."""
    from torchtune_longshort.data.torchtune_datasets import _skipping_reader

    f = tmp_path / "a.jsonl"
    f.write_text('{"text": "x"}\n')
    args = {"source": "json", "data_files": str(f), "split": "train", "skip_bad_records": False}
    assert _skipping_reader([("train", f)], args, None, "dataset") is None
    way = _skipping_reader([("train", f)], args, "text", "dataset")
    assert way.endswith("dataset.skip_bad_records=True ~dataset.source ~dataset.data_files ~dataset.split"), way

