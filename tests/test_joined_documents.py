"""Sequences from short documents: ``join_documents`` packs consecutive documents (a blank line between two) into a
stream and cuts it end to end, checked against the concatenation made by hand; the metadata key reaches it through
the perplexity and misalignment tasks; the stdlib's train / held-out split is a partition of the corpus whose
held-out part the ``stdlib_heldout`` source reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchtune_longshort.eval.tasks.common.token_sequences import (
    JOIN_SEPARATOR,
    TaskDataError,
    TaskTokenizer,
    fixed_length_samples,
)

# Short documents of different lengths (none reaches 40 characters): no sequence of 40 tokens fits in any one.
DOCS = [f"doc {i}: " + "abcdefghij"[: 3 + i % 7] * (1 + i % 3) for i in range(30)]


class CharTokenizer:
    """One token per character: every slice of ids round-trips, so the by-hand reference is plain string slicing."""

    name = "chars"

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_joined_sequences_are_the_by_hand_concatenation_cut_end_to_end():
    length, n = 40, 5
    samples = fixed_length_samples(iter(DOCS), CharTokenizer(), length, n, join_documents=True)
    stream = JOIN_SEPARATOR.join(DOCS)  # by hand
    assert [s.text for s in samples] == [stream[k * length:(k + 1) * length] for k in range(n)]
    assert [s.start for s in samples] == [k * length for k in range(n)]
    assert all(s.token_ids == [ord(c) for c in s.text] and s.doc_index == 0 for s in samples)
    # without joining, no document is long enough
    with pytest.raises(TaskDataError, match=r"only 0 of num_samples=5 .* \(longest document: \d+ tokens\)"):
        fixed_length_samples(iter(DOCS), CharTokenizer(), length, n)


def test_unjoined_documents_give_their_first_chunks_down_to_a_document_of_exactly_the_length():
    # by hand: a document of exactly 40 characters is one sequence; one of 39 none; 2 chunks of a 100-character one
    docs = ["x" * 39, "a" * 40, "".join(chr(65 + i % 26) for i in range(100))]
    samples = fixed_length_samples(iter(docs), CharTokenizer(), 40, 3, chunks_per_doc=2)
    assert [(s.doc_index, s.start, s.text) for s in samples] == [
        (1, 0, docs[1]), (2, 0, docs[2][:40]), (2, 40, docs[2][40:80])]


def test_joined_sequences_with_a_real_tokenizer_are_slices_of_the_joined_text(sp_tokenizer_dir):
    tok = TaskTokenizer(str(sp_tokenizer_dir))
    docs = [f"def f{i}(x):\n    return x * {i} + {i * i}  # note {i}\n" for i in range(80)]
    length, n = 128, 6
    samples = fixed_length_samples(iter(docs), tok, length, n, join_documents=True)
    by_hand = tok.encode(JOIN_SEPARATOR.join(docs))
    starts = [s.start for s in samples]
    assert starts == sorted(starts) and all(b - a >= length for a, b in zip(starts, starts[1:]))
    for s in samples:
        assert s.token_ids == by_hand[s.start:s.start + length]
        assert tok.encode(s.text) == s.token_ids and len(s.token_ids) == length
    assert max(len(tok.encode(d)) for d in docs) < length  # every sequence spans documents


def test_joining_refuses_too_little_text_and_chunks_per_doc():
    total = len(JOIN_SEPARATOR.join(DOCS))
    with pytest.raises(TaskDataError, match=r"only \d+ of num_samples=100 .* joined documents \(30 documents"):
        fixed_length_samples(iter(DOCS), CharTokenizer(), 40, 100, join_documents=True)
    assert total // 40 < 100
    with pytest.raises(TaskDataError, match="chunks_per_doc=2 with join_documents"):
        fixed_length_samples(iter(DOCS), CharTokenizer(), 40, 2, chunks_per_doc=2, join_documents=True)


@pytest.mark.parametrize("family", ["ppl", "misalignment"])
def test_the_tasks_read_join_documents_from_their_metadata(family, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.tasks.misalignment.task import misalignment_dataset
    from torchtune_longshort.eval.tasks.ppl.task import long_ppl_dataset

    folder = tmp_path / "docs"
    folder.mkdir()
    for i, d in enumerate(DOCS):
        (folder / f"{i:02d}.txt").write_text(d)
    dataset, p = (long_ppl_dataset, "ppl") if family == "ppl" else (misalignment_dataset, "mis")
    meta = {"max_seq_lengths": "32", "tokenizer": str(sp_tokenizer_dir), f"{p}_data_files": str(folder),
            f"{p}_num_samples": 3}
    alone = dataset(**meta)["test"]
    assert len(alone) == 1 and "longest document" in alone[0]["error"]  # a placeholder: no document has 32 tokens
    # the way on in the task's own keys (the bare join_documents / chunks_per_doc were refused as unknown keys)
    assert (f"join its documents ({p}_join_documents), raise {p}_chunks_per_doc, or lower the length / "
            f"{p}_num_samples in --metadata") in alone[0]["error"]
    joined = dataset(**meta, **{f"{p}_join_documents": True})["test"]
    assert len(joined) == 3 and not any(r["error"] for r in joined)
    tok = TaskTokenizer(str(sp_tokenizer_dir))
    by_hand = tok.encode(JOIN_SEPARATOR.join(DOCS))
    at = 0  # each row is the next slice of the by-hand stream (a start moves on a token when a cut does not round-trip)
    for r in joined:
        ids = tok.encode(r["text"])
        assert len(ids) == 32
        at = next(i for i in range(at, at + 16) if by_hand[i:i + 32] == ids) + 32
    bad = dataset(**meta, **{f"{p}_join_documents": "often"})["test"]
    assert f"{p}_join_documents='often'" in bad[0]["error"]


def test_stdlib_train_and_heldout_splits_partition_the_corpus():
    from torchtune_longshort.data.corpus import stdlib
    from torchtune_longshort.data.stdlib_corpus import (HELDOUT_EVERY, TEST_PACKAGES, in_heldout, stdlib_dir,
                                                        stdlib_source_files)
    from torchtune_longshort.eval.tasks.common.long_text import iter_texts

    root = stdlib_dir()
    train, held, every = (set(stdlib_source_files(split=s)) for s in ("train", "heldout", None))
    assert train and held and not (train & held) and train | held == every
    rel = lambda f: f.relative_to(root).as_posix()  # noqa: E731
    assert set(stdlib_source_files(include_tests="only")) <= held  # the test packages are held out
    assert not any(rel(f).split("/")[0] in TEST_PACKAGES and "/" in rel(f) for f in train)
    others = [f for f in every if not (rel(f).split("/")[0] in TEST_PACKAGES and "/" in rel(f))]
    share = sum(f in held for f in others) / len(others)
    assert abs(share - 1 / HELDOUT_EVERY) < 0.08  # about one file in HELDOUT_EVERY, by path hash
    assert in_heldout("json/decoder.py") == in_heldout("json/decoder.py") and in_heldout("test/test_json.py")
    # a training corpus read with include_tests False and split train never sees what stdlib_heldout reads
    assert set(stdlib_source_files(include_tests=False, split="train")) == train
    first = sorted(held)[0].read_text(encoding="utf-8", errors="replace")
    assert next(iter(iter_texts("stdlib_heldout"))) == first
    assert "split=train" in repr(stdlib(include_tests=False, split="train"))
    with pytest.raises(ValueError, match="split='test'"):
        stdlib_source_files(split="test")


def test_the_recipe_accepts_the_split_of_its_dataset(tmp_path):
    """The fine-tune side of the split: corpus.stdlib(split=...) is a dataset node the recipe's typed config binds."""
    from omegaconf import OmegaConf

    from torchtune_longshort.training.recipe_config import RecipeConfig
    from torchtune_longshort.config.fields import build_section

    root = Path(__file__).resolve().parents[1]
    node = OmegaConf.to_container(OmegaConf.load(root / "configs/tiny/longshort_stdlib.yaml"), resolve=True)
    node["dataset"] = {"_component_": "torchtune_longshort.data.corpus.stdlib", "include_tests": False,
                       "split": "train"}
    node["output_dir"] = str(tmp_path)
    build_section(RecipeConfig, json.loads(json.dumps(node)), local=False)
    node["dataset"]["splitt"] = node["dataset"].pop("split")
    with pytest.raises(Exception, match="did you mean 'split'"):
        build_section(RecipeConfig, json.loads(json.dumps(node)), local=False)


def test_too_few_sequences_names_the_longest_document_or_the_pre_filter_that_left_none(tmp_path):
    """Before, a 37-character file given as ``ppl_data_files`` for 256 tokens gave "longest document: 0 tokens":
    the cheap pre-filter (documents under length // 2 characters are not read) had left no document to tokenize,
    and the count of none was printed as a length. Now the reason names the pre-filter; a document that passes it
    is counted by the tokenizer (the reference: its own encode)."""
    from torchtune_longshort.eval.tasks.common.long_text import samples_from_metadata
    from torchtune_longshort.study.records import short_reason

    short = tmp_path / "short.txt"
    short.write_text("A text far too short for 256 tokens.\n")
    meta = {"ppl_data_files": str(short)}
    with pytest.raises(TaskDataError) as e:
        samples_from_metadata(meta, "ppl", 256, 1, CharTokenizer())
    assert "(no document of 128 characters or more; shorter ones are not tokenized)" in str(e.value)
    assert "0 tokens" not in str(e.value)
    assert short_reason(f"longshort_ppl: {e.value}") == ("the text could not fill the length: 0 of 1 sequences of "
                                                         "256 tokens; no document of 128 characters or more")
    with pytest.raises(TaskDataError, match=rf"\(longest document: {len(short.read_text())} tokens\)"):
        samples_from_metadata(meta, "ppl", 64, 1, CharTokenizer())  # 37 >= 32 characters: read, and counted
