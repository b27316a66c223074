"""`tune run --nproc_per_node 2` on the tiny config in a fresh folder, where rank 1 won the turn to train the
tokenizer: rank 1 says nothing (only rank 0 speaks), and rank 0 waited mute for the whole training, then said only
'Tokenizer: ... was trained by another process meanwhile ...': no sign, while it took the time, that a tokenizer was
being trained. Now rank 0 says when its wait starts that another process trains one, and when it ends how long the
training took it; rank 1 stays silent, so one process's output tells of the training, never two.

Two forked processes stand for the ranks (``RANK`` 1 and 0 of ``WORLD_SIZE=2``, as torchrun sets them); rank 1 enters
the training first (a stand-in that writes tokenizer.model after 0.6 s), rank 0 starts while it trains. Reference: the
training's own start and end on the system's monotonic clock, taken by rank 1, and the calls of the training function
counted by each process in a file.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time

import torchtune.models.llama2
import torchtune.utils  # noqa: F401  (imported before the fork: the progress lines' logger)

from torchtune_longshort.training import bootstrap

TRAINING_S = 0.6


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append((time.monotonic(), record.getMessage()))


def _rank(rank: int, path: str, calls: str, inside, results) -> None:
    def counted(documents, into, **kw):
        start = time.monotonic()
        with open(calls, "a") as f:
            f.write(f"trained by rank {rank}\n")
        inside.set()
        time.sleep(TRAINING_S)
        (into / "tokenizer.model").write_text("trained")
        results.put(("training", start, time.monotonic()))

    os.environ.update(WORLD_SIZE="2", RANK=str(rank))
    bootstrap.train_sentencepiece = counted
    torchtune.models.llama2.llama2_tokenizer = lambda file, max_seq_len=None: open(file).read()
    handler = _Lines()
    logging.getLogger("torchtune").addHandler(handler)
    if rank == 0:
        assert inside.wait(30)  # rank 1 holds the turn and trains
    bootstrap.stdlib_sentencepiece_tokenizer(path, vocab_size=512, train_files_limit=1)
    results.put((rank, [line for line in handler.lines if line[1].startswith("Tokenizer:")], time.monotonic()))


def test_rank_zero_tells_of_the_training_rank_one_did_while_it_waits(tmp_path):
    ctx = multiprocessing.get_context("fork")
    path, calls = tmp_path / "outputs" / "tokenizers" / "stdlib_512", tmp_path / "calls.txt"
    inside, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(rank, str(path), str(calls), inside, results)) for rank in (1, 0)]
    for p in procs:
        p.start()
    got = [results.get(timeout=60) for _ in range(3)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert calls.read_text() == "trained by rank 1\n"
    (_, start, end), = [g for g in got if g[0] == "training"]
    said = {g[0]: g[1] for g in got if g[0] != "training"}
    returned = {g[0]: g[2] for g in got if g[0] != "training"}
    assert said[1] == []  # the trainer, rank 1, is silent: rank 0 reports for it
    signs = [t for t, msg in said[0] if t < end and str(path.parent) in msg]  # a sign while it trains
    assert len(signs) == 1, said[0]
    told = [msg for t, msg in said[0] if "was trained" in msg]
    assert len(told) == 1 and str(path / "tokenizer.model") in told[0], said[0]
    # the wait it names: from its sign (the wait's start) to at least the training's end, at most its own return;
    # bounds on the shared monotonic clock, whatever the machine's load (0.05: the line's one decimal)
    waited = float(told[0].split(" in the ")[1].split(" s ")[0])
    assert end - signs[0] - 0.05 <= waited <= returned[0] - signs[0] + 0.05, (told[0], end - signs[0])
