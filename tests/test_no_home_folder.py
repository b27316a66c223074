"""A user with no home folder: ``HOME`` unset and a user id the password database does not know (``docker run --user
12345``), where ``Path.home()`` raises ``RuntimeError``. ``longshort-validate ... overwrite_output_dir=True`` and the
model cache (``python -m torchtune_longshort.models.gguf --model ...``) ended in that traceback. The subprocess makes
that environment: HOME removed, and ``pwd.getpwuid`` answering KeyError, as the C library's lookup does for such a
user id (the reference that it is that environment: Python's own ``Path.home()`` raises there)."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NO_HOME = """
import pathlib, pwd, sys
def unknown(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")
pwd.getpwuid = unknown
try:
    pathlib.Path.home()
    sys.exit("Path.home() did not raise: not the environment this test is about")
except RuntimeError:
    pass
"""


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "LONGSHORT_CACHE", "XDG_CACHE_HOME", "LONGSHORT_TRACEBACK")}
    return subprocess.run([sys.executable, "-c", NO_HOME + code], env={**env, "PYTHONPATH": str(REPO)}, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_overwrite_checks_and_the_model_cache_without_a_home_folder(tmp_path):
    from torchtune_longshort.training.output_aside import MARKER

    ours, theirs, cache = tmp_path / "ours", tmp_path / "theirs", tmp_path / "cache"
    for folder in (ours, theirs):
        folder.mkdir()
    (ours / MARKER).write_text("{}\n")
    # one process (one import of torch): the overwrite rule, the fix the cache's line names, then the cache's line
    code = f"""
import json, os
from torchtune_longshort.training.overwrite_rules import deletion_refusal
from torchtune_longshort.models.gguf_cache import cache_dir
from torchtune_longshort.refusals import refusing
print(json.dumps([deletion_refusal(pathlib.Path(p), [], []) for p in {[str(ours), str(theirs)]!r}]))
os.environ["LONGSHORT_CACHE"] = {str(cache)!r}
print(cache_dir())
del os.environ["LONGSHORT_CACHE"]
refusing("prog", cache_dir)
"""
    done = _run(code, tmp_path)
    assert done.stdout, done.stderr[-800:]  # the parent commit: Path.home()'s traceback, nothing printed
    mine, other = json.loads(done.stdout.splitlines()[0])
    assert mine is None and "did not make it" in other, done.stdout + done.stderr
    assert done.stdout.splitlines()[1] == str(cache)
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("prog: error: the model cache has no folder: HOME is not set"), err
    assert "LONGSHORT_CACHE=<folder>" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours", "theirs"]  # nothing made


def test_the_cache_s_field_without_a_home_folder(tmp_path):
    # cache_field() (how a refusal names a folder of the cache) called Path.home() itself: its RuntimeError traceback
    done = _run("from torchtune_longshort.models.gguf_cache import cache_field\nprint(cache_field())", tmp_path)
    assert done.returncode == 0, done.stderr[-800:]
    line = done.stdout.strip()
    assert line.startswith("the model folder in ~/.cache/torchtune_longshort (HOME is not set"), line
    assert "LONGSHORT_CACHE=<folder> moves it" in line, line
