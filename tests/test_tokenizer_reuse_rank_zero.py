"""Under torchrun (``tune run --nproc_per_node 2``) the tiny configs' tokenizer said "Tokenizer: reusing
.../tokenizer.model ..." once per rank: the config check builds it before the process group exists, where torchtune's
``log_rank_zero`` takes every process for rank 0. The rank is the launcher's ``RANK`` (as torchrun sets it): rank 1
says nothing, rank 0 says it once."""

import logging
import shutil

import pytest

from torchtune_longshort.training.bootstrap import stdlib_sentencepiece_tokenizer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok") / "stdlib"
    stdlib_sentencepiece_tokenizer(str(folder), vocab_size=512, train_files_limit=3)
    return folder


@pytest.mark.parametrize("rank,said", [("1", 0), ("0", 1)])
def test_reuse_is_said_by_rank_zero_alone(trained, tmp_path, monkeypatch, caplog, rank, said):
    cached = tmp_path / f"rank{rank}"
    shutil.copytree(trained, cached)  # a folder an earlier run trained, read by this rank of a 2-process launch
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    caplog.set_level(logging.INFO)
    stdlib_sentencepiece_tokenizer(str(cached), vocab_size=512, train_files_limit=3)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Tokenizer:")]
    assert lines == [f"Tokenizer: reusing {cached / 'tokenizer.model'}, already there (not trained again; its "
                     "vocab_size is its own: remove the folder to train it anew)"] * said
