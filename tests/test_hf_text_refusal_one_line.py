"""A torn JSON line read by ``hf_text`` (``source: json`` + ``data_files``, or ``source: <folder>``), or by a
torchtune builder's ``load_dataset``, is refused in one line on stderr. Before, ``datasets``' json builder logged its
own line first, ``Failed to load JSON from file '...' with error <class 'pyarrow.lib.ArrowInvalid'>: ...``, ahead of
the refusal that names ``a.jsonl:4``. References: the torn line found with ``json.loads`` line by line, and
``datasets``' own json builder logging that line for the same file (so the one-line check can fail)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from datasets import load_dataset

from bounded_child import run_bounded

LINES = ['{"text": "a a a"}', '{"text": "b b b"}', '{"text": "c c c"}', '{"text": "torn', '{"text": "d d d"}']
# What a user's run does with the dataset: the recipe builds hf_text from its `dataset:` and refuses as `refusing`.
RUN = ("import sys; from torchtune_longshort.data import corpus; from torchtune_longshort.refusals import refusing; "
       "refusing('longshort_finetune', "
       "lambda: corpus.hf_text(sys.argv[1], **dict(a.split('=') for a in sys.argv[2:])))")


def _torn_line(path: Path) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        try:
            json.loads(line)
        except json.JSONDecodeError:
            return i
    raise AssertionError("no torn line")


# "streaming=" (an empty string, read as False): a read not streamed, whose "Generating train split" bar printed
# ahead of the refusal
@pytest.mark.parametrize("args", [["json", "data_files={}/a.jsonl"], ["{}/books"], ["{}/books", "streaming="]],
                         ids=["data_files", "folder", "folder_not_streamed"])
def test_a_torn_line_is_refused_in_one_line_on_stderr(tmp_path, args, caplog):
    args = [a.format(tmp_path) for a in args]
    books = tmp_path / "books"
    books.mkdir()
    for path in (tmp_path / "a.jsonl", books / "a.jsonl"):
        path.write_text("\n".join(LINES) + "\n")
    with caplog.at_level(logging.ERROR), pytest.raises(Exception):  # datasets' own line, for this very file
        list(load_dataset("json", data_files=str(tmp_path / "a.jsonl"), split="train", streaming=True))
    assert any(r.getMessage().startswith("Failed to load JSON from file") for r in caplog.records)
    torn = tmp_path / "a.jsonl" if args[0] == "json" else books / "a.jsonl"
    p = run_bounded(RUN, *args, seconds=60, spun="hf_text on a torn line")
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [p.stderr.strip()], p.stderr
    assert p.stderr.startswith(f"longshort_finetune: error: dataset: {torn}:{_torn_line(tmp_path / 'a.jsonl')}: "
                               "not a JSON line"), p.stderr


# A torchtune-style builder (its first parameter the tokenizer) that loads its files as torchtune's
# text_completion_dataset does (load_dataset(source, data_files=..., split=...)), built as the recipe builds it;
# datasets' progress bars on, as a user has them: its "Generating train split" bar printed ahead of the refusal.
BUILD = ("import sys, datasets; from torchtune_longshort.data.torchtune_datasets import build_torchtune_dataset; "
         "from torchtune_longshort.refusals import refusing; "
         "builder = lambda tokenizer, source, data_files, split: datasets.load_dataset(source, data_files=data_files, "
         "split=split); refusing('longshort_finetune', lambda: build_torchtune_dataset(builder, None, "
         "{'source': 'json', 'data_files': sys.argv[1], 'split': 'train'}))")


def test_a_torn_line_in_a_torchtune_builder_s_files_is_refused_in_one_line_on_stderr(tmp_path, monkeypatch):
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    monkeypatch.delenv("HF_DATASETS_DISABLE_PROGRESS_BARS", raising=False)
    p = run_bounded(BUILD, path, seconds=60, spun="a torchtune builder on a torn line")
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [p.stderr.strip()], p.stderr
    assert p.stderr.startswith(f"longshort_finetune: error: dataset: {path}:{_torn_line(path)}: not a JSON line")


def test_held_lines_are_handed_on_where_no_refusal_explains_them():
    from torchtune_longshort._quiet import HeldRecords  # new here: the test above runs on the parent commit too
    from torchtune_longshort.data.hf_loading import builder_loggers

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger(builder_loggers()[0])
    logger.addHandler(handler)
    try:
        held = HeldRecords(builder_loggers())
        with held:
            logger.error("kept")
            logger.error("dropped")
        assert records == []
        held.held.pop()
        held.release()
        held.release()  # what was handed on is not handed on again
        with held:
            logger.error("forgotten")
        held.drop()
        held.release()
        logger.error("after")
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == ["kept", "after"]


def test_datasets_bars_show_once_a_held_read_has_run_its_delay():
    """:func:`late_bars`: a datasets bar closed before the delay writes nothing (a refusal then is its one line), one
    updated after it shows (a long read keeps its progress), and bars outside the block are stock tqdm's (shown at
    once). The reference: the same bar class written to a buffer without the hook."""
    import io
    import time

    from datasets.utils import tqdm as bar

    from torchtune_longshort._quiet import late_bars

    def shown(pause: float, **kwargs) -> str:
        out = io.StringIO()
        with bar(total=2, desc="Generating train split", file=out, mininterval=0, **kwargs) as b:
            time.sleep(pause)
            b.update(2)
        return out.getvalue()

    assert "Generating train split" in shown(0)  # stock: shown at once, as a refusal's stderr had it
    with late_bars(0.2):
        with late_bars(0.2):  # nested: the outer block's hook stays
            pass
        assert shown(0) == ""
        assert "2/2" in shown(0.25)
        assert "Generating train split" in shown(0, delay=0)  # a bar's own delay is its own
    assert "Generating train split" in shown(0)
