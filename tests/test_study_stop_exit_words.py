"""A stage stopped by a signal was told two ways: '(exit 143)' where it exited itself after the signal (the recipe's
128 + signal) and '(exit -15)' where the signal killed it (Popen's -signal), SIGINT alike ('(exit 130)' / '(exit -2)').
Both now read as a shell reports the status: 'stopped by SIGTERM (exit 143)'. The reference: ``sh -c '...; echo $?'``
on the same child killed by the same signal."""

import os
import subprocess
import sys

import pytest

from torchtune_longshort.study.stages import StudyInterrupted, run_command


def _shell_status(code: str) -> int:
    """The exit status sh reports for ``python -c code``."""
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}"; echo $?'], capture_output=True, text=True,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    return int(out.stdout.split()[-1])


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stage_killed_by_a_signal_and_one_exiting_after_it_read_alike(tmp_path, sig):
    killed = f"import os, signal; signal.signal(signal.{sig}, signal.SIG_DFL); os.kill(os.getpid(), signal.{sig})"
    status = _shell_status(killed)
    words = []
    for code in (killed, f"import sys; sys.exit({status})"):  # killed by it; exited itself with the shell's status
        with pytest.raises(StudyInterrupted) as e:
            run_command([sys.executable, "-c", code], tmp_path / "s.log", tmp_path, {}, 30)
        words.append(str(e.value))
    assert words[0] == words[1] == f"{sys.executable.rsplit('/', 1)[-1]} stopped by {sig} (exit {status})"
