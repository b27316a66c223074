"""Two runs started at the same time with one fresh ``tokenizer.path`` (a job started twice, or a sweep): the run
that is refused must not remove the tokenizer folder the other run reads (the recipe copies it into every
checkpoint). Reference: the other run's folder, as it placed it. Before, the refused run removed any folder that was
absent when its setup began: the running run then ended at its first save ("tokenizer source ... does not exist").

The race is made deterministic: the other run is a real process that places (or loads) the folder and holds the
output folder's lock; it is started from inside this run's tokenizer training (before it or after it is placed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from torchtune_longshort.training import bootstrap

REPO = Path(__file__).resolve().parents[1]
TOK = dict(vocab_size=512, train_files_limit=10)
# The other run, as the OS sees its tokenizer load: it puts a trained folder in place by a rename when the folder is
# absent (bootstrap trains aside and renames), then reads it, holding a shared flock on it while it runs (plain
# Python: started in milliseconds, where a fresh interpreter importing torchtune takes seconds).
OTHER_RUN = (
    "import fcntl, os, sys, time\n"
    "trained, folder = sys.argv[1], sys.argv[2]\n"
    "if not os.path.exists(folder):\n"
    "    os.system(f'cp -r {trained} {folder}.other && mv -T {folder}.other {folder}')\n"
    "fd = os.open(folder, os.O_RDONLY)\n"
    "fcntl.flock(fd, fcntl.LOCK_SH)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained") / "tok"
    subprocess.run([sys.executable, "-c", "import sys; from torchtune_longshort.training.bootstrap import "
                    "stdlib_sentencepiece_tokenizer as t; t(sys.argv[1], vocab_size=512, train_files_limit=10)",
                    str(folder)], cwd=REPO, check=True)
    return folder


def _other_run(trained: Path, folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", OTHER_RUN, str(trained), str(folder)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "LONGSHORT_TEST_FRESH": "1"})  # a kill reaches it
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.parametrize("other_places_it", [True, False], ids=["other-run-trained-it", "other-run-loaded-ours"])
def test_a_refused_run_keeps_the_tokenizer_another_run_reads(tmp_path, monkeypatch, trained, other_places_it):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    tok, out, others = tmp_path / "tok", tmp_path / "out", []
    real_train = bootstrap.train_sentencepiece

    def train_in_a_race(documents, into, **kw):
        if other_places_it:  # the other run's rename comes first: this run loads the other's folder
            others.append(_other_run(trained, tok))
        real_train(documents, into, **kw)

    def placed_then_read(cfg, tokenizer):  # this run's folder placed: the other run starts and loads it
        if not other_places_it:
            others.append(_other_run(trained, tok))
        (out / ".lock").write_text(f"{others[0].pid}\n")  # and it holds the output folder

    monkeypatch.setattr(bootstrap, "train_sentencepiece", train_in_a_race)
    monkeypatch.setattr("torchtune_longshort.training.recipe_setup.check_tokenizer_vocab", placed_then_read)
    cfg = OmegaConf.load(REPO / "configs/tiny/longshort_stdlib.yaml")
    OmegaConf.update(cfg, "tokenizer", {"_component_": cfg.tokenizer._component_, "path": str(tok), **TOK},
                     merge=False)
    cfg.output_dir, cfg.validation, cfg.max_steps = str(out), None, 2
    out.mkdir()
    try:
        with pytest.raises(RuntimeError, match="in use by another run"):
            LongShortFinetuneRecipe(cfg).setup()
        assert (tok / "tokenizer.model").is_file(), "the refused run removed the tokenizer the other run reads"
    finally:
        for p in others:
            p.kill()
            p.wait()


def test_a_refused_run_still_removes_the_tokenizer_only_it_trained(tmp_path, trained):
    tok = tmp_path / "tok"
    bootstrap.stdlib_sentencepiece_tokenizer(str(tok), **TOK)
    other = _other_run(trained, tok)  # read by another process: kept
    try:
        assert not bootstrap.discard_trained_tokenizer(tok) and (tok / "tokenizer.model").is_file()
    finally:
        other.kill()
        other.wait()
    assert bootstrap.discard_trained_tokenizer(tok) and not tok.exists()  # no one else: removed, as before
