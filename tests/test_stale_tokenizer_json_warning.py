"""A step folder written before the recipe wrote a right tokenizer.json for a SentencePiece model without the dummy
prefix (add_dummy_prefix: false) keeps a file whose normalizer prepends '▁': ``--model hf`` (AutoTokenizer) read
'hello' as [▁h, el, lo] where the run trained on [h, el, lo], without a word (a tiny step's ppl_64 556.7 where the
rewritten file gives 528.3). ``longshort-eval run --model hf`` now warns in one line naming the folder and the
command that rewrites the file. The reference: sentencepiece and AutoTokenizer on the same folder, over texts other
than the warning's probe."""

from __future__ import annotations

import logging
import re
import shutil

import pytest

TEXTS = ["hello", " hello", "def f(x):\n    return x", "a  b"]


def _agree(folder) -> bool:
    import sentencepiece as spm
    from transformers import AutoTokenizer

    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    auto = AutoTokenizer.from_pretrained(str(folder))
    return all(sp.encode(t) == auto.encode(t, add_special_tokens=False) for t in TEXTS)


@pytest.fixture
def stale_step(sp_tokenizer_dir, tmp_path, monkeypatch):
    """tokenizer.model without the dummy prefix, tokenizer.json as the recipe wrote it before (a prepended '▁')."""
    import torchtune_longshort.models.hf_tokenizer as hf_tokenizer
    from torchtune_longshort.models.added_tokens import without_dummy_prefix

    folder = tmp_path / "step_1"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(without_dummy_prefix((sp_tokenizer_dir / "tokenizer.model").read_bytes()))
    with monkeypatch.context() as m:
        m.setattr(hf_tokenizer, "adds_dummy_prefix", lambda model: True)  # what the writer took every model for
        hf_tokenizer.write_hf_tokenizer_files(folder)
    return folder


def test_a_stale_tokenizer_json_is_warned_of_and_the_named_command_rewrites_it(stale_step, caplog):
    from torchtune_longshort.eval.other_model_args import check_other_model_args

    assert not _agree(stale_step)  # what --model hf reads is not what the run trained on
    with caplog.at_level(logging.WARNING):
        check_other_model_args({"pretrained": str(stale_step)}, "hf")
    said = [r.getMessage() for r in caplog.records if "tokenizer.json" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0], said
    assert said[0].startswith(f"--model_args pretrained={stale_step}: its tokenizer.json encodes 'hello world' as ")
    command = re.search(r'python -c "([^"]+)"', said[0]).group(1)
    exec(command, {})  # the fix the line names, as a user runs it
    assert _agree(stale_step)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        check_other_model_args({"pretrained": str(stale_step)}, "hf")
    assert not [r for r in caplog.records if "tokenizer.json" in r.getMessage()]


def test_a_folder_whose_tokenizer_json_agrees_is_not_warned_of(sp_tokenizer_dir, tmp_path, caplog):
    from torchtune_longshort.eval.other_model_args import check_other_model_args

    folder = tmp_path / "step_1"
    shutil.copytree(sp_tokenizer_dir, folder)  # the dummy prefix: the file prepends '▁', as SentencePiece does
    assert _agree(folder)
    with caplog.at_level(logging.WARNING):
        check_other_model_args({"pretrained": str(folder), "tokenizer": str(folder)}, "hf")
    assert not [r for r in caplog.records if "tokenizer.json" in r.getMessage()]
