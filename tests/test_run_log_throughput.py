"""The logged throughput (RunLog.log_step) against hand arithmetic on a fake clock: tokens / seconds since the last
logged step, a paused block (validation, a checkpoint) left out, ``tokens_per_second_per_gpu`` = that over
``world_size`` (torchtune's name and meaning: the README), and the count restarted at each logged step."""

from __future__ import annotations

import types

import torch

from torchtune_longshort.training import metrics
from torchtune_longshort.training.metrics import RunLog


class _Rows:
    def __init__(self):
        self.rows = []

    def log(self, step, row):
        self.rows.append((step, dict(row)))

    def log_dict(self, row, step):
        pass


def test_tokens_per_second_leaves_out_paused_time_and_splits_over_gpus(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(metrics, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    jsonl = _Rows()
    run = RunLog(_Rows(), jsonl, enabled=True)
    sums = {"loss": 2.0, "ce": 2.0, "misalignment": 0.5, "e": 3.0}

    run.tokens += 6000  # as the recipe counts: added micro-batch by micro-batch
    now[0] = 101.0
    with run.paused():  # 1.5 s of validation: not training time
        now[0] = 102.5
    now[0] = 104.0  # 4 s since the start, 2.5 s of them training
    run.log_step(1, sums, 1e-4, {}, torch.device("cpu"), world_size=4)

    run.tokens += 900  # the next step: 0.5 s, nothing paused; the count started again at the logged step
    now[0] = 104.5
    run.log_step(2, sums, 1e-4, {}, torch.device("cpu"), world_size=4)

    (s1, r1), (s2, r2) = jsonl.rows
    assert (s1, s2) == (1, 2)
    assert r1["tokens_per_second"] == 6000 / 2.5 and r1["tokens_per_second_per_gpu"] == 6000 / 2.5 / 4
    assert r2["tokens_per_second"] == 900 / 0.5 and r2["tokens_per_second_per_gpu"] == 900 / 0.5 / 4
