"""A ``--use_cache`` file another process locks while ``longshort-eval`` checks it (after its first read): the
check's ``SqliteDict`` thread printed sqlite's traceback ("Failed to execute PRAGMA statements." and "Exception in
thread ...") on stderr before the one-line refusal. The user sees the refusal alone, the file unchanged."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("lm_eval")

from sqlitedict import SqliteDict  # noqa: E402

from torchtune_longshort.eval.model.response_cache import OWNER_KEY  # noqa: E402

# Runs the check in its own process, so that whatever reaches stderr (a thread's traceback, logging's last resort)
# is what a user's terminal shows. Every sqlite connection to the file hands back its statements' rows whole, and
# after the first statement on the file another process takes its lock (BEGIN EXCLUSIVE: a concurrent run writing).
RACE = textwrap.dedent("""
    import sqlite3, subprocess, sys
    from torchtune_longshort.eval.model.response_cache import check_cache_files
    db, holder, connect = sys.argv[2], [], sqlite3.connect

    class Rows(list):
        def fetchall(self): return list(self)
        def fetchone(self): return self[0] if self else None

    class Racing:
        def __init__(self, conn): object.__setattr__(self, "conn", conn)
        def __getattr__(self, name): return getattr(self.conn, name)
        def __setattr__(self, name, value): setattr(self.conn, name, value)
        def __enter__(self): return self
        def __exit__(self, *exc): return self.conn.__exit__(*exc)
        def execute(self, *a):
            rows = Rows(self.conn.execute(*a).fetchall())
            if not holder:
                holder.append(subprocess.Popen([sys.executable, "-c", (
                    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
                    "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read()"), db],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
                assert holder[0].stdout.readline() == "locked\\n"
            return rows

    sqlite3.connect = lambda path, *a, **k: (Racing if str(path) == db else lambda c: c)(connect(path, *a, **k))
    try:
        check_cache_files(sys.argv[1], None, "hf", busy_timeout=0.2)
        print("no refusal", file=sys.stderr)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
    finally:
        holder[0].stdin.close(); holder[0].wait()
""")


def test_a_lock_taken_during_the_check_is_refused_in_one_line_without_a_traceback(tmp_path):
    db = tmp_path / "c_rank0.db"
    with SqliteDict(str(db), autocommit=True) as d:  # a longshort model's signed cache
        d[OWNER_KEY] = {"rope": "linear:2"}
        d["0" * 64] = -1.0
    before = db.read_bytes()
    run = subprocess.run([sys.executable, "-c", RACE, str(tmp_path / "c"), str(db)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr == (f"error: --use_cache: {db} is in use by another process (a run given the same --use_cache "
                          "path holds it locked); wait for that run to end, or give this run its own --use_cache "
                          "path\n")
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["c_rank0.db"]
