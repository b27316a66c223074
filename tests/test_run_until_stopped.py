"""``study.stop.run_until_stopped`` on its own (mutants21: only the study's slow stop tests reached it). Its
docstring is the reference: each call on a pool of ``jobs`` threads, results in call order, a stop error from a call
sets ``stopping`` and gives None for that call while the others' results are kept."""

from __future__ import annotations

import threading

from torchtune_longshort.study.stop import run_until_stopped


class _Stop(Exception):
    pass


def test_jobs_calls_run_at_once_and_results_come_in_call_order():
    # two calls that each wait for the other: they finish only when the pool runs both at once (jobs=2)
    barrier = threading.Barrier(2, timeout=3)
    calls = [lambda: (barrier.wait(), "first")[1], lambda: (barrier.wait(), "second")[1], lambda: "third"]
    stopping = threading.Event()
    assert run_until_stopped(2, calls, stopping) == (["first", "second", "third"], None)
    assert not stopping.is_set()


def test_a_stop_from_a_call_sets_stopping_and_gives_none_in_its_place():
    stop = _Stop("stopped")

    def stopped():
        raise stop

    stopping = threading.Event()
    results, got = run_until_stopped(1, [lambda: 1, stopped, lambda: 3], stopping, stop_errors=(_Stop,))
    assert results == [1, None, 3] and got is stop and stopping.is_set()
