"""A stage killed before it wrote a line (kill -9 on tune ~2 s after it started, while it imported torch) was told
with its log's header as the reason: '... recipe killed by SIGKILL (exit 137; ...): $ /.../tune run ...', the
``$ argv`` line run_command writes first, the last line of a log holding nothing else. It now says so: '...: no
output before it ended'. The references: the log itself (the header, then nothing) and sh's $? of the same child."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from torchtune_longshort.study.stages import StageError, run_command, run_eval

SILENT = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
SAID = "import os, signal; print('loading', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # a minimal env: the child starts at once


def _shell_status(code: str) -> int:
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}"; echo $?'], capture_output=True, text=True,
                         env=ENV)
    return int(out.stdout.split()[-1])


def _failure(tmp_path, code: str) -> StageError:
    with pytest.raises(StageError) as e:
        run_eval(run_command, [sys.executable, "-c", code], tmp_path / "eval.log", tmp_path, ENV, 30, tmp_path, [])
    return e.value


def test_a_stage_killed_before_it_wrote_a_line_says_so_not_its_command_line(tmp_path):
    e = _failure(tmp_path, SILENT)
    header, *rest = (tmp_path / "eval.log").read_text().splitlines()
    assert header.startswith("$ ") and not any(x.strip() for x in rest)  # the log: its header, then nothing
    killed = f"lm-eval killed by SIGKILL (exit {_shell_status(SILENT)}; out of memory? see dmesg)"
    assert e.message == f"{killed}: no output before it ended", e.message


def test_a_stage_that_wrote_a_line_is_still_told_by_it(tmp_path):
    e = _failure(tmp_path, SAID)
    assert (tmp_path / "eval.log").read_text().splitlines()[-1] == "loading"
    assert e.message == f"lm-eval killed by SIGKILL (exit {_shell_status(SAID)}; out of memory? see dmesg): loading"
