"""The data's records before step 1: a bad record named with its file and line, skipped and counted when asked,
an empty corpus refused."""

from __future__ import annotations

import re

import pytest


def _jsonl(tmp_path, lines, name="c.jsonl"):
    p = tmp_path / "corpus"
    p.mkdir(exist_ok=True)
    (p / name).write_bytes(b"".join(lines))
    return p


GOOD = b'{"text": "' + b"def f(x):\\n    return x + 1\\n" * 200 + b'"}\n'


@pytest.mark.parametrize("bad,match", [
    (b'{"text": "ok"\n', r"c.jsonl:2: not a JSON line"),
    (b'{"text": "\xff\xfe broken"}\n', r"c.jsonl:2: bytes that are not utf-8"),
    (b'{"body": "no text field"}\n', r"c.jsonl:2: .*'text'"),
])
def test_bad_records_are_named_with_file_and_line_before_anything(tmp_path, bad, match):
    from torchtune_longshort.data.corpus import local_text

    with pytest.raises(ValueError, match=match):
        local_text(str(_jsonl(tmp_path, [GOOD, bad, GOOD])))


def test_bad_records_can_be_skipped_and_counted(tmp_path, caplog):
    from torchtune_longshort.data.corpus import local_text

    path = _jsonl(tmp_path, [GOOD, b"not json\n", b'{"text": "\xff"}\n', GOOD])
    from torchtune_longshort.data.text_files import SkippedRecord

    docs = list(local_text(str(path), skip_bad_records=True)())
    assert "skipped 2 unreadable records" in caplog.text
    # as the stream reads them: each skipped record in its place, named, with no tokens
    assert [type(d).__name__ for d in docs] == ["str", "SkippedRecord", "SkippedRecord", "str"]
    assert re.search(r"c.jsonl:2: not a JSON line", docs[1].message) and list(docs[1]) == []
    assert re.search(r"c.jsonl:3: bytes that are not utf-8", docs[2].message) and isinstance(docs[2], SkippedRecord)


def test_empty_corpus_is_refused(tmp_path):
    from torchtune_longshort.data.corpus import local_text

    (tmp_path / "d").mkdir()
    for i in range(3):
        (tmp_path / "d" / f"{i}.txt").write_text("")
    with pytest.raises(ValueError, match="yields no non-empty documents"):
        local_text(str(tmp_path / "d"))


@pytest.mark.parametrize("section", ["dataset", "validation.dataset"])
def test_a_bad_record_past_the_config_checks_head_names_its_own_section(tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
                                                                        section):
    """A bad record past the first 64 KiB (which the config check reads) is found when the run starts, before any
    folder exists; the message's keys are the section's that reads it: ``validation.dataset.skip_bad_records``
    for validation data (it said ``dataset.skip_bad_records``, a key that does not skip it)."""
    from recipe_config import make_cfg
    from torchtune_longshort.data.file_kinds import HEAD_BYTES
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    good = (HEAD_BYTES // len(GOOD)) + 2
    corpus = _jsonl(tmp_path, [GOOD] * good + [b'{"body": "no text field"}\n', GOOD])
    node = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(corpus)}
    over = {"dataset": node} if section == "dataset" else {
        "validation": {"dataset": node, "seq_len": 64, "num_sequences": 1}}
    out = tmp_path / "out"
    run = LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, **over))  # the head is good
    with pytest.raises(ValueError) as err:
        run.setup()
    said = str(err.value)
    assert f"c.jsonl:{good + 1}: " in said and f"{section}.text_field" in said
    assert said.endswith(f"skip such records with {section}.skip_bad_records=True")
    assert " dataset." not in said.replace(f" {section}.", " ") and not out.exists()
