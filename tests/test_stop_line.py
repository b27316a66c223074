"""The line a run stopped by SIGTERM / SIGINT ends with (``training.stop_signals.stopped_line``).

A stop that lands on the run's last step used to say "continue with resume=True", and that resume only said "Nothing
to train". The last step is the one the recipe trains to: ``max_steps``, or the paper's Appendix F equal-compute count
(200 steps at overhead 1.0526 -> 190, the paper's own figures), not the recipe's code.
"""

from __future__ import annotations

import signal

import pytest

from torchtune_longshort.training.equal_compute import trained_steps
from torchtune_longshort.training.stop_signals import stopped_line


@pytest.mark.parametrize("max_steps, overhead, last", [(8, None, 8), (200, 1.0526, 190)])
def test_a_stop_on_the_last_step_says_the_run_is_finished(max_steps, overhead, last):
    steps = trained_steps(max_steps, overhead, 0.1)
    line = stopped_line(signal.SIGTERM, last, steps, f"out/step_{last}")
    assert line.startswith(f"SIGTERM received: finished step {last}, saved out/step_{last}")
    assert "run is finished" in line and f"out/step_{last} is its final checkpoint" in line
    assert "resume=True" not in line


def test_a_stop_before_the_last_step_says_to_resume():
    steps = trained_steps(200, 1.0526, 0.1)
    line = stopped_line(signal.SIGINT, 189, steps, "out/step_189")
    assert line == "SIGINT received: finished step 189, saved out/step_189; continue with resume=True"
    # the cross-entropy baseline (alpha 0) trains all 200: its step 190 is not its last
    assert stopped_line(signal.SIGTERM, 190, trained_steps(200, 1.0526, 0.0), "s").endswith("resume=True")
