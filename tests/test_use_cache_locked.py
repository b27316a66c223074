"""A ``--use_cache`` file another process holds locked (a concurrent run given the same path) was taken for no
cache after sqlite's 5 s wait, silently: its signature never compared, so ``--model hf`` went on to a cache a
``longshort`` model signed. It is refused naming the file, nothing written."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing

import pytest

pytest.importorskip("lm_eval")

from sqlitedict import SqliteDict  # noqa: E402

from torchtune_longshort.eval.model.response_cache import OWNER_KEY, check_cache_files  # noqa: E402


def test_a_cache_file_locked_by_another_process_is_refused_naming_it(tmp_path):
    db = tmp_path / "c_rank0.db"
    with SqliteDict(str(db), autocommit=True) as d:  # a longshort model's signed cache
        d[OWNER_KEY] = {"rope": "linear:2"}
        d["0" * 64] = -1.0
    before = db.read_bytes()
    with closing(sqlite3.connect(str(db), isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")  # a concurrent run writing it
        with pytest.raises(sqlite3.OperationalError) as busy:  # sqlite's own answer to a reader now
            sqlite3.connect(str(db), timeout=0).execute("SELECT name FROM sqlite_master").fetchall()
        assert busy.value.sqlite_errorcode == sqlite3.SQLITE_BUSY
        start = time.monotonic()
        with pytest.raises(ValueError) as refused:
            check_cache_files(str(tmp_path / "c"), None, "hf", busy_timeout=0.2)
        assert time.monotonic() - start < 2
        other.execute("ROLLBACK")
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"--use_cache: {db} is in use by another process")
    assert line.endswith("give this run its own --use_cache path")
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["c_rank0.db"]
    with pytest.raises(ValueError, match="holds the answers of a longshort model"):  # unlocked: its owner compared
        check_cache_files(str(tmp_path / "c"), None, "hf", busy_timeout=0.2)
