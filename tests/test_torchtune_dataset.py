"""A torchtune dataset config plugs into the recipe unchanged: ``text_completion_dataset`` on local JSON gives the
same windows (so the same losses, bit for bit) as the project's own reader of the same texts, and resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
CFG = REPO / "configs" / "tiny" / "longshort_from_checkpoint.yaml"


@pytest.fixture(scope="module")
def texts_json(tmp_path_factory):
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

    d = tmp_path_factory.mktemp("tt_data")
    texts = [t for t in iter_stdlib_documents(limit=12, include_tests=False) if t.strip()]
    (d / "train.json").write_text(json.dumps([{"text": t} for t in texts]))
    (d / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return d


def _run(tmp_path, name, ckpt, tok, dataset, **over):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    cfg = OmegaConf.load(CFG)
    cfg.checkpoint_dir = str(ckpt)
    cfg.tokenizer.path = str(Path(tok) / "tokenizer.model")
    cfg.output_dir = str(tmp_path / name)
    cfg.validation = None
    cfg.dataset = OmegaConf.create(dataset)
    for k, v in {"max_steps": 4, "save_every_n_steps": 2, "batch_size": 2, **over}.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    r = LongShortFinetuneRecipe(cfg)
    r.setup()
    r.train()
    r.cleanup()
    rows = [json.loads(l) for l in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return [(x["step"], x["loss"]) for x in rows if "loss" in x]


def test_text_completion_dataset_on_local_json_trains_like_our_reader_and_resumes(
    tmp_path, texts_json, tiny_llama2_dir, sp_tokenizer_dir
):
    ours = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(texts_json / "train.jsonl")}
    torchtune_cfg = {  # as a torchtune user writes it
        "_component_": "torchtune.datasets.text_completion_dataset",
        "source": "json",
        "data_files": str(texts_json / "train.json"),
        "column": "text",
        "split": "train",
    }
    ref = _run(tmp_path, "ours", tiny_llama2_dir, sp_tokenizer_dir, ours)
    got = _run(tmp_path, "tt", tiny_llama2_dir, sp_tokenizer_dir, torchtune_cfg)
    assert [s for s, _ in got] == [1, 2, 3, 4] and got == ref
    _run(tmp_path, "tt_resumed", tiny_llama2_dir, sp_tokenizer_dir, torchtune_cfg, stop_after_step=2)
    resumed = _run(tmp_path, "tt_resumed", tiny_llama2_dir, sp_tokenizer_dir, torchtune_cfg, resume=True)
    assert resumed == got


def test_a_resumed_torchtune_dataset_starts_at_its_position_without_rebuilding_the_records_before(
    tmp_path, tiny_llama2_dir, sp_tokenizer_dir, monkeypatch
):
    # A resume used to build (and so tokenize) every record consumed before the stop, one by one, to skip it:
    # O(consumed) before the first resumed step (40k short records: 2.8 s). The records before are now not built;
    # the resumed run still gives the uninterrupted run's losses, bit for bit.
    import torch
    from torchtune.datasets._text_completion import TextCompletionDataset

    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

    lines = [l for t in iter_stdlib_documents(limit=12, include_tests=False) for l in t.splitlines() if l.strip()]
    (tmp_path / "lines.json").write_text(json.dumps([{"text": l} for l in lines[:400]]))
    node = {"_component_": "torchtune.datasets.text_completion_dataset", "source": "json", "split": "train",
            "data_files": str(tmp_path / "lines.json"), "column": "text"}
    got = _run(tmp_path, "whole", tiny_llama2_dir, sp_tokenizer_dir, node)
    _run(tmp_path, "stopped", tiny_llama2_dir, sp_tokenizer_dir, node, stop_after_step=2)
    state = torch.load(tmp_path / "stopped" / "recipe_state" / "step_2.pt", weights_only=False)
    position = state["data"]["stream"]["docs_consumed"]
    built, getitem = [], TextCompletionDataset.__getitem__
    monkeypatch.setattr(TextCompletionDataset, "__getitem__", lambda ds, i: built.append(i) or getitem(ds, i))
    resumed = _run(tmp_path, "stopped", tiny_llama2_dir, sp_tokenizer_dir, node, resume=True)
    assert resumed == got and [s for s, _ in got] == [1, 2, 3, 4]
    assert position > 5 and built  # records read in the first steps, then records read by the resumed ones
    assert [i for i in built if 0 < i < position] == []  # record 0: the source's first-record check


def test_a_builder_s_own_fault_and_log_lines_pass_through_the_build(caplog):
    """Only ``datasets``' failures are explained as a file that cannot be loaded: a builder's own error is raised as
    it is, and the lines ``datasets``' builders log while a build goes well are handed on once it ends."""
    import logging

    from torchtune_longshort.data.hf_loading import builder_loggers
    from torchtune_longshort.data.torchtune_datasets import build_torchtune_dataset

    logger = builder_loggers()[0]

    def builder(tokenizer, source):
        logging.getLogger(logger).warning("kept: %s", source)
        if source == "boom":
            raise RuntimeError("the builder's own fault")
        return [source]

    logging.getLogger(logger).addHandler(caplog.handler)  # datasets' loggers may not reach the root one
    try:
        with caplog.at_level(logging.WARNING, logger=logger):
            assert build_torchtune_dataset(builder, None, {"source": "x"}) == ["x"]
            with pytest.raises(RuntimeError, match="^the builder's own fault$"):
                build_torchtune_dataset(builder, None, {"source": "boom"})
    finally:
        logging.getLogger(logger).removeHandler(caplog.handler)
    said = [r.getMessage() for r in caplog.records if r.name == logger]
    assert list(dict.fromkeys(said)) == ["kept: x", "kept: boom"], said  # once each, by the logger or the root


def test_a_map_style_source_restored_past_its_end_is_refused_naming_the_counts():
    from torchtune_longshort.data.document_source import DocumentSource
    from torchtune_longshort.data.dual_window import PackedTokenStream

    docs = [[1, 2, 3]] * 4
    source = DocumentSource(lambda: iter(docs), "four documents", count=len(docs),
                            read=lambda idx: (docs[i] for i in idx))
    stream = PackedTokenStream(source)
    stream.load_state_dict({"epoch": 1, "docs_consumed": 3, "tokens_consumed": 9, "buffer": [7]})
    assert stream.take(5) == [7, 1, 2, 3, 1] and (stream.epoch, stream.docs_consumed) == (2, 1)  # the last, a new pass
    stream.load_state_dict({"epoch": 1, "docs_consumed": 5, "tokens_consumed": 9, "buffer": []})
    with pytest.raises(ValueError, match="cannot resume: the corpus has only 4 documents but the saved state "
                                         "consumed 5 in epoch 1"):
        stream.take(1)


def test_packed_torchtune_dataset_is_refused(tmp_path, texts_json, tiny_llama2_dir, sp_tokenizer_dir):
    packed = {"_component_": "torchtune.datasets.text_completion_dataset", "source": "json",
              "data_files": str(texts_json / "train.json"), "column": "text", "split": "train", "packed": True}
    with pytest.raises(ValueError, match="dataset.packed=True is not accepted"):
        _run(tmp_path, "packed", tiny_llama2_dir, sp_tokenizer_dir, packed)
    assert not (tmp_path / "packed").exists()  # refused before the output folder exists


def test_an_instruct_dataset_that_masks_its_prompts_is_refused_before_anything_is_written(
    tmp_path, tiny_llama2_dir, sp_tokenizer_dir
):
    """``instruct_dataset`` with ``train_on_input=False`` masks each prompt's labels with -100; the recipe kept only
    ``tokens`` and trained on the prompts (an audit). Refused, naming the key and the fix; with
    ``train_on_input=True`` (nothing masked) it trains."""
    rows = [{"input": f"def f{i}(x):\n    return x + {i}\n", "output": f"f{i}(1) == {i + 1}\n" * 20} for i in range(30)]
    (tmp_path / "instr.json").write_text(json.dumps(rows))
    instruct = {"_component_": "torchtune.datasets.instruct_dataset", "source": "json",
                "data_files": str(tmp_path / "instr.json"), "split": "train", "train_on_input": False}
    with pytest.raises(ValueError, match=r"masks \d+ of its \d+ labels .*dataset.train_on_input=True"):
        _run(tmp_path, "masked", tiny_llama2_dir, sp_tokenizer_dir, instruct, max_steps=1, save_every_n_steps=None)
    assert not (tmp_path / "masked").exists()
    steps = _run(tmp_path, "unmasked", tiny_llama2_dir, sp_tokenizer_dir, {**instruct, "train_on_input": True},
                 max_steps=1, save_every_n_steps=None)
    assert [s for s, _ in steps] == [1]


def test_shuffle_true_reads_torchtunes_order_and_resumes_mid_pass_exactly(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """torchtune's ``shuffle: True`` on a torchtune dataset: the recipe trains on another order than the file's (the
    permutation itself is checked against torch's sampler in test_dual_window.py); a run stopped mid-pass and resumed
    gives the uninterrupted run's losses, bit for bit."""
    import torch

    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

    lines = [l for t in iter_stdlib_documents(limit=12, include_tests=False) for l in t.splitlines() if l.strip()]
    (tmp_path / "lines.json").write_text(json.dumps([{"text": l} for l in lines[:400]]))
    node = {"_component_": "torchtune.datasets.text_completion_dataset", "source": "json", "split": "train",
            "data_files": str(tmp_path / "lines.json"), "column": "text"}
    got = _run(tmp_path, "whole", tiny_llama2_dir, sp_tokenizer_dir, node, shuffle=True)
    in_order = _run(tmp_path, "in_order", tiny_llama2_dir, sp_tokenizer_dir, node)
    assert [s for s, _ in got] == [1, 2, 3, 4] and got[0] != in_order[0]
    _run(tmp_path, "stopped", tiny_llama2_dir, sp_tokenizer_dir, node, shuffle=True, stop_after_step=2)
    state = torch.load(tmp_path / "stopped" / "recipe_state" / "step_2.pt", weights_only=False)["data"]["stream"]
    assert state["epoch"] == 0 and 0 < state["docs_consumed"] < 400 and state["shuffle_seed"] == 0  # mid-pass
    assert _run(tmp_path, "stopped", tiny_llama2_dir, sp_tokenizer_dir, node, shuffle=True, resume=True) == got


def test_shuffle_true_on_a_streamed_source_is_refused_before_any_folder(tmp_path, texts_json, tiny_llama2_dir,
                                                                        sp_tokenizer_dir):
    streamed = {"_component_": "torchtune_longshort.data.corpus.hf_text", "source": "json", "streaming": True,
                "data_files": str(texts_json / "train.jsonl")}
    with pytest.raises(ValueError, match=r"^shuffle=True: dataset <documents: hf_text\('json'.* is read as a stream, "
                                         r"in order .*; set shuffle=False, or read the data as a map-style") as caught:
        _run(tmp_path, "streamed", tiny_llama2_dir, sp_tokenizer_dir, streamed, shuffle=True)
    assert "\n" not in str(caught.value) and not (tmp_path / "streamed").exists()


def test_a_bad_chat_row_is_named_by_its_own_line_not_as_a_missing_text_column(tmp_path, sp_tokenizer_dir):
    """A chat / instruct builder reads no text column: a row it could not build was described by the text reader
    (``chat.jsonl:1: no text field 'text' ... Set dataset.column``), line 1 whatever the row. Its own line is named
    now, with the builder's error; ``text_completion_dataset``'s rows are still read as text (its ``column``)."""
    from torchtune.datasets import chat_dataset, text_completion_dataset

    from torchtune_longshort.data.text_files import DataRecordError
    from torchtune_longshort.data.torchtune_datasets import torchtune_documents
    from torchtune_longshort.models import checkpoint_tokenizer
    from torchtune_longshort.training.data_setup import text_column_of

    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
    bad = {"messages": [{"role": "user", "content": "beep"}]}  # torchtune: at least two messages
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (good, good, bad, good)))
    args = {"source": "json", "data_files": str(tmp_path / "chat.jsonl"), "conversation_column": "messages",
            "conversation_style": "openai", "split": "train", "train_on_input": True}
    ds = chat_dataset(checkpoint_tokenizer(str(sp_tokenizer_dir)), **args)
    assert text_column_of(chat_dataset) is None and text_column_of(text_completion_dataset) == "text"
    # a ``column`` with no text default names no column (not inspect's "empty" marker, not a list of columns)
    assert text_column_of(lambda tokenizer, column: 0) is None
    assert text_column_of(lambda tokenizer, column=("a", "b"): 0) is None
    from torchtune_longshort.data.torchtune_datasets import takes_tokenizer

    # a torchtune builder takes the tokenizer first; one that takes it later is called as any other component
    assert takes_tokenizer(chat_dataset) and not takes_tokenizer(lambda source, tokenizer: 0)
    docs = torchtune_documents(ds, name="chat_dataset", args=args, column=text_column_of(chat_dataset))
    want = r"chat.jsonl:3 \(ValueError building the sample: Messages must be at least length 2"
    with pytest.raises(DataRecordError, match=want) as e:
        list(docs())
    assert "no text field" not in str(e.value)


def test_a_text_that_is_a_list_is_named_as_no_string_not_as_giving_no_token_ids(tmp_path, sp_tokenizer_dir):
    """``{"text": ["a", "b"]}`` tokenizes without an error (a list of token lists), so the record was named as
    ``list.jsonl:2 gives no token ids (dict ['labels', 'tokens'])``, where a number or null names the field and its
    type; it names them now, as ``json.loads`` reads the line."""
    from torchtune.datasets import text_completion_dataset

    from torchtune_longshort.data.text_files import DataRecordError
    from torchtune_longshort.data.torchtune_datasets import torchtune_documents
    from torchtune_longshort.models import checkpoint_tokenizer

    rows = [{"text": "def f():\n    return 1\n"}, {"text": ["a", "b"]}]
    (tmp_path / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = {"source": "json", "data_files": str(tmp_path / "list.jsonl"), "column": "text", "split": "train"}
    ds = text_completion_dataset(checkpoint_tokenizer(str(sp_tokenizer_dir)), **args)
    docs = torchtune_documents(ds, name="text_completion_dataset", args=args)
    held = type(json.loads(json.dumps(rows[1]))["text"]).__name__
    with pytest.raises(DataRecordError, match=rf"list.jsonl:2: field 'text' holds {held} ") as e:
        list(docs())
    assert "no token ids" not in str(e.value)


@pytest.mark.parametrize("skip", [False, True])
def test_a_torchtune_source_whose_first_records_all_fail_is_refused_at_build(skip):
    """Checked before a run starts (not at its first step): a source of bad records only, skipped or not."""
    from torchtune_longshort.data.text_files import DataRecordError
    from torchtune_longshort.data.torchtune_datasets import torchtune_documents

    with pytest.raises(DataRecordError, match="none of its first 3 records can be read" if skip else "no token ids"):
        torchtune_documents([{"tokens": []}] * 3, name="empty_rows", skip_bad_records=skip)
