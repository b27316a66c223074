"""worker_pool.unordered when a worker dies after its result, or raises what does not travel back: the call ends in
its own errors (``WorkerDied``, naming the worker; a ``RuntimeError`` naming the function), not in the pipe's."""

import time
from contextlib import closing

import pytest
from pool_fns import exits_with, killed_after_returning, raises_two_arguments

from torchtune_longshort.worker_pool import WorkerDied, unordered


def test_a_worker_killed_after_its_result_ends_the_call_in_worker_died_with_its_result_kept():
    # Each worker returns at once and is killed 0.3 s later; the loop's body takes 0.8 s (a cache entry on a slow
    # disk), so the next item is handed to a worker already dead. Before: BrokenPipeError from the pipe's write (the
    # synthetic CLI's traceback, exit 1), and the result just received was dropped.
    got = []
    with pytest.raises(WorkerDied, match=r"was killed by SIGKILL before it returned its result \(the out-of-memory "
                                         r"killer sends SIGKILL: fewer workers need less memory\)$"):
        with closing(unordered(killed_after_returning, [1, 2, 3, 4], 2)) as results:
            for value in results:
                got.append(value)
                time.sleep(0.8)
    # the result received from the worker found dead is yielded before the call ends (which results: timing)
    assert len(got) == 2 and set(got) <= {1, 2, 3}, got


def test_an_exception_that_does_not_unpickle_reaches_the_caller_named_with_the_worker_traceback():
    # Before: the parent's recv ended the call in "TypeError: TwoArguments.__init__() missing 1 required positional
    # argument: 'why'", naming neither the function nor what it raised.
    with pytest.raises(RuntimeError) as caught:
        with closing(unordered(raises_two_arguments, [7], 2)) as results:
            list(results)
    message = str(caught.value)
    assert message.startswith("raises_two_arguments: the TwoArguments it raised (item 7: no luck) could not be sent "
                              "back: TypeError: "), message
    assert "raise TwoArguments" in str(caught.value.__cause__)  # the worker's traceback, as for any exception


def test_a_worker_that_exits_with_a_status_is_named_without_the_out_of_memory_hint():
    # Before: 'worker process N exited with status 3 before it returned its result (the out-of-memory killer sends
    # SIGKILL: fewer workers need less memory)': the hint for a status the run's own code chose (os._exit(3)).
    with pytest.raises(WorkerDied, match=r"^worker process \d+ exited with status 3 before it returned its result$"):
        with closing(unordered(exits_with, [3], 2)) as results:
            list(results)
