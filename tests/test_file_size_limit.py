"""A write that fails past ``ulimit -f`` (``EFBIG``; the kernel's error, got here by a child with ``RLIMIT_FSIZE``
set) is told as that limit, with its fix, not as a full disk: the line said "no space left on the disk writing ...
(68 GiB free of 252 GiB on /): [Errno 27] File too large; free space there", and the recipe's "make room"."""

import errno
import json
import os
import resource
import subprocess
import sys

from torchtune_longshort.training.checkpointing import StepCheckpoints
from torchtune_longshort.training.out_of_space import stop_message

LIMIT = 4096  # bytes: size_text says "4 KiB"

CHILD = """
import json, sys
from torchtune_longshort.disk_space import out_of_space_line
try:
    with open(sys.argv[1], "wb") as f:
        f.write(bytes(3 * {limit}))
except OSError as e:
    print(json.dumps({{"errno": e.errno, "strerror": e.strerror, "filename": e.filename,
                      "line": out_of_space_line(e)}}))
""".format(limit=LIMIT)


def _limited():
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def _write_past_limit(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LONGSHORT_TEST_ZYGOTE"}  # a warm start: not its limit
    p = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "big.bin")], preexec_fn=_limited, env=env,
                       capture_output=True, text=True, timeout=60)
    got = json.loads(p.stdout or "null")
    assert got is not None, p.stderr
    assert got["errno"] == errno.EFBIG  # the reference: the kernel's own error for this write
    return got


def test_past_ulimit_f_is_said_as_that(tmp_path):
    line = _write_past_limit(tmp_path)["line"]
    assert "no space left" not in line and "free space there" not in line, line
    assert "ulimit -f: 4 KiB" in line and "raise that limit" in line, line


def test_the_recipe_says_raise_the_limit_not_make_room(tmp_path):
    got = _write_past_limit(tmp_path)
    error = OSError(got["errno"], got["strerror"], got["filename"])
    line = stop_message("checkpoint step_1", 1, StepCheckpoints(tmp_path / "out"), None, False, error)
    assert "no space left" not in line and "make room" not in line, line
    assert "raise that limit" in line and "[Errno 27]" in line, line
