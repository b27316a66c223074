"""`tune run --nproc_per_node 2` on the tiny config in a fresh folder: each of torchrun's ranks builds the tokenizer
component, and both trained the same missing `tokenizer.path` at once (twice the CPU on a shared machine), the rank
that lost the rename saying 'Tokenizer: ... was put in place by another run meanwhile; using it', a run that was not
there. Now one process trains and the other, given its turn after, reads that folder.

Two forked processes stand for the two ranks, started together (a barrier) on one fresh path; the training (a stand-in
writing a tokenizer.model named by its process, then the recipe's own rename into place) is slowed so that they
overlap, as two ranks starting together do. Reference: the calls of the training function, counted by each process in
a file, and the bytes of the folder's own tokenizer.model, which both processes must have read.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import torchtune.models.llama2
import torchtune.utils  # noqa: F401  (imported before the fork: the progress lines' logger)

from torchtune_longshort.training import bootstrap


def _rank(path: str, calls: str, barrier, results) -> None:
    def counted(documents, into, **kw):
        with open(calls, "a") as f:
            f.write(f"trained by {os.getpid()}\n")
        time.sleep(0.5)  # both ranks inside the training at once, as two ranks starting together are
        (into / "tokenizer.model").write_text(f"made by {os.getpid()}")

    bootstrap.train_sentencepiece = counted
    torchtune.models.llama2.llama2_tokenizer = lambda file, max_seq_len=None: open(file).read()
    barrier.wait()
    results.put(bootstrap.stdlib_sentencepiece_tokenizer(path, vocab_size=512, train_files_limit=1))


def test_two_ranks_on_one_fresh_tokenizer_path_train_it_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    path, calls = tmp_path / "outputs" / "tokenizers" / "stdlib_512", tmp_path / "calls.txt"
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(str(path), str(calls), barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    read = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert calls.read_text().count("trained by") == 1, calls.read_text()
    placed = (path / "tokenizer.model").read_text()
    assert read == [placed, placed]
    assert sorted(q.name for q in path.parent.iterdir()) == ["stdlib_512"]  # no training folder left beside it


def _other_rank_refused(path: str, ready) -> None:
    bootstrap._TRAINED.clear()  # another process: it trained nothing and holds nothing (fork copied the dicts)
    bootstrap._HELD.clear()
    bootstrap.stdlib_sentencepiece_tokenizer(path, vocab_size=512, train_files_limit=1)  # read, not trained
    bootstrap.discard_trained_tokenizer(path)  # this rank refused too (the recipe's setup calls it on every rank)
    ready.set()
    time.sleep(30)  # still alive, as torchrun's other rank is while the first one cleans up


def test_a_run_refused_on_both_ranks_removes_the_tokenizer_its_rank_trained(tmp_path, monkeypatch):
    # a 2-process run refused at setup (a corpus too short) left the folder it trained every time: the rank that only
    # read it still held it. Reference: the folder itself, gone; as a refused one-process run leaves it.
    monkeypatch.setattr(bootstrap, "train_sentencepiece",
                        lambda documents, into, **kw: (into / "tokenizer.model").write_text("trained"))
    monkeypatch.setattr(torchtune.models.llama2, "llama2_tokenizer", lambda file, max_seq_len=None: open(file).read())
    root = tmp_path / "outputs"
    path = root / "tokenizers" / "stdlib_512"
    bootstrap.stdlib_sentencepiece_tokenizer(str(path), vocab_size=512, train_files_limit=1)  # rank 0 trains it
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    other = ctx.Process(target=_other_rank_refused, args=(str(path), ready))
    other.start()
    try:
        assert ready.wait(30)
        assert bootstrap.discard_trained_tokenizer(path)
        assert not root.exists()
    finally:
        other.kill()
        other.join()
