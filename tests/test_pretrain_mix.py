"""The study's pre-training mix: stdlib documents, each followed by passkey documents that are the eval task's own
prompt plus its answer, within the pre-training length."""

import itertools
import re

import pytest
import sentencepiece as spm

from torchtune_longshort.eval.tasks.passkey.task import QUESTION, TASK_DESCRIPTION, process_results
from torchtune_longshort.study.pretrain_mix import stdlib_with_passkeys


def test_passkey_documents_fit_and_carry_the_right_answer(sp_tokenizer_dir):
    mix = stdlib_with_passkeys(str(sp_tokenizer_dir), max_tokens=256, passkeys_per_document=3, limit=2)
    docs = list(mix())
    assert len(docs) == 2 * (1 + 3)  # each stdlib file, then its three passkey documents
    sp = spm.SentencePieceProcessor(model_file=str(sp_tokenizer_dir / "tokenizer.model"))
    keys = set()
    for d in docs[1:4] + docs[5:8]:
        assert d.startswith(TASK_DESCRIPTION) and QUESTION in d
        key = re.search(r"The pass key is (\d+)\. Remember it\.", d).group(1)  # the needle's key
        prompt, answer = d.rsplit(QUESTION, 1)
        assert answer == f" {key}."  # the answer the question asks for
        assert 1 + len(sp.encode(d)) <= 256  # BOS + document within the pre-training length
        # the eval task's own scorer accepts the appended answer as the continuation of the prompt
        assert process_results({"answer": key, "length": 256, "depth": 0}, [answer])["acc"] == 1.0
        keys.add(key)
    assert len(keys) == 6  # fresh keys
    assert docs == list(mix())  # the same documents on every pass (resume and epochs)
    assert "import" in docs[0] or "def " in docs[0]  # the stdlib file itself comes first


def test_refuses_what_cannot_work(sp_tokenizer_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer_path"):
        stdlib_with_passkeys(str(tmp_path), max_tokens=128)
    with pytest.raises(ValueError, match="max_tokens"):
        stdlib_with_passkeys(str(sp_tokenizer_dir), max_tokens=40)
    assert len(list(itertools.islice(stdlib_with_passkeys(str(sp_tokenizer_dir), max_tokens=256,
                                                          passkeys_per_document=0, limit=3)(), 5))) == 3
