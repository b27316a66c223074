"""A metrics.jsonl line that is not JSON (not the last, which a kill may tear) is refused with the fix (before:
'<run>/metrics.jsonl:1: not a JSON line (...)' alone, from a resume and from the study's reading of a run)."""

from __future__ import annotations

import re

import pytest

from torchtune_longshort.training.metrics import metric_lines


def test_a_bad_metrics_line_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('garbage {"step": 0}\n{"step": 1}\n{"step": 2}\n')
    with pytest.raises(ValueError) as info:
        metric_lines(path)
    assert re.fullmatch(r".*/metrics\.jsonl:1: not a JSON line \('garbage \{\"step\": 0\}'\): mend that line or "
                        r"delete it \(each line is one logged step's JSON\)", str(info.value)), str(info.value)


def test_a_line_with_a_byte_that_is_not_utf8_is_named_as_a_bad_line(tmp_path):
    """Before: "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte", naming no file or line."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'\xff{"step": 0}\n{"step": 1}\n')
    with pytest.raises(ValueError) as info:
        metric_lines(path)
    assert re.fullmatch(r".*/metrics\.jsonl:1: not a JSON line \('\ufffd\{\"step\": 0\}'\): mend that line or "
                        r"delete it \(each line is one logged step's JSON\)", str(info.value)), str(info.value)


def test_a_metrics_jsonl_that_is_a_pipe_is_refused_without_reading_it(tmp_path):
    """A named pipe at <run>/metrics.jsonl (mkfifo; os.stat tells it, the reference): a resume would block reading
    it; refused in one line, not named a folder."""
    import os
    import stat
    import threading
    import time

    from torchtune_longshort.training.metrics import resumed_lines

    path = tmp_path / "metrics.jsonl"
    os.mkfifo(path)
    assert stat.S_ISFIFO(os.stat(path).st_mode)

    def unblock():  # a reader of the pipe (a regression) gets an end of file, not a wait forever
        for _ in range(100):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO while no one reads it
                return
            except OSError:
                time.sleep(0.05)

    threading.Thread(target=unblock, daemon=True).start()
    with pytest.raises(ValueError) as info:
        resumed_lines(path, 2)
    assert str(info.value) == (f"resume=True: {path} is not a regular file, where the recipe writes the run's metrics "
                               f"(a file, one JSON line a logged step): move it out of {tmp_path}, then resume (a "
                               "fresh metrics.jsonl is started)")


@pytest.mark.parametrize("target", ["theirs.jsonl", "missing.jsonl"])
def test_a_metrics_jsonl_that_is_a_symbolic_link_is_refused_and_its_target_left_alone(tmp_path, target):
    """A user's link at <run>/metrics.jsonl (os.path.islink, the reference) to a file of theirs was read (a line of
    theirs without a step kept) and replaced by the resumed run's file; one to a file not there was written through,
    making it in their folder. Now refused like a folder, before anything is written."""
    import os

    from torchtune_longshort.training.metrics import resumed_lines

    theirs = tmp_path / "user"
    theirs.mkdir()
    (theirs / "theirs.jsonl").write_text('{"mine": 1}\n')
    run = tmp_path / "run"
    run.mkdir()
    path = run / "metrics.jsonl"
    os.symlink(theirs / target, path)
    assert os.path.islink(path)
    with pytest.raises(ValueError) as info:
        resumed_lines(path, 2)
    assert str(info.value) == (f"resume=True: {path} is a symbolic link, where the recipe writes the run's metrics "
                               f"(a file, one JSON line a logged step): move it out of {run}, then resume (a fresh "
                               "metrics.jsonl is started)")
    assert os.path.islink(path) and sorted(os.listdir(theirs)) == ["theirs.jsonl"]
    assert (theirs / "theirs.jsonl").read_text() == '{"mine": 1}\n'
