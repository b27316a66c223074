"""A resume whose tokenizer folder was deleted and trained anew by the stdlib bootstrap (another tokenizer than the
run's) is refused, and the refused run removes the folder it trained; its advice 'Put the run's file back (cp <step>/
tokenizer.model tokA/tokenizer.model)' then failed, 'cp: cannot create regular file ...: No such file or directory'.
The printed advice is run here, by sh, after the refusal's removal, and must put the run's tokenizer back."""

from __future__ import annotations

import re
import subprocess

import pytest


def test_the_put_back_advice_works_after_the_refused_run_removed_the_folder_it_trained(tmp_path, monkeypatch):
    from torchtune_longshort.training.bootstrap import discard_trained_tokenizer, stdlib_sentencepiece_tokenizer
    from torchtune_longshort.training.tokenizer_unchanged import check_tokenizer_unchanged

    monkeypatch.chdir(tmp_path)
    step = tmp_path / "out" / "step_2"
    step.mkdir(parents=True)
    run_model = b"the tokenizer the run trained with"
    (step / "tokenizer.model").write_bytes(run_model)
    stdlib_sentencepiece_tokenizer("tokA", vocab_size=400, train_files_limit=3)  # tokA/ trained anew by this process
    with pytest.raises(ValueError) as refused:
        check_tokenizer_unchanged(step, {"tokenizer": {"path": "tokA"}})
    assert discard_trained_tokenizer(tmp_path / "tokA")  # the refused run removes what it trained
    assert not (tmp_path / "tokA").exists()
    advice = re.search(r"Put the run's file back \((.*?)\), or start", str(refused.value)).group(1)
    done = subprocess.run(["sh", "-c", advice], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tokA" / "tokenizer.model").read_bytes() == run_model
