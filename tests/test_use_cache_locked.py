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


@pytest.mark.parametrize("value", [b"garbage", b"\x80\x04\x95", b"cnot_a_module\nThing\n."])
@pytest.mark.parametrize("model", ["hf", "longshort"])
def test_a_cache_whose_owner_does_not_decode_is_refused_naming_it(tmp_path, value, model):
    import pickle

    from torchtune_longshort.eval.model.response_cache import owner_refusal

    with pytest.raises(Exception) as upstream:  # pickle's own read of the value: no owner comes out of it
        pickle.loads(value)
    db = tmp_path / "c_rank0.db"
    with SqliteDict(str(db), autocommit=True) as d:
        d["0" * 64] = -1.0
    with closing(sqlite3.connect(str(db))) as conn, conn:  # written by something else under the owner's key
        conn.execute("INSERT INTO unnamed (key, value) VALUES (?, ?)", (OWNER_KEY, value))
    before = db.read_bytes()
    with pytest.raises(ValueError) as refused:
        check_cache_files(str(tmp_path / "c"), {"rope": "linear:2"} if model == "longshort" else None, model)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"--use_cache: {db}: its entry {OWNER_KEY!r} does not decode "
                                                f"({type(upstream.value).__name__}: "), line
    assert line.endswith("move the file aside, or give this run another --use_cache path"), line
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["c_rank0.db"]
    with SqliteDict(str(db), flag="r") as cache, pytest.raises(ValueError) as claimed:  # the model's own check
        owner_refusal(cache, {"rope": "linear:2"})
    assert str(claimed.value) == line
    db.rename(tmp_path / "c_rank0.bak.db")  # a copy set aside, no rank's file: lm-eval never opens it
    check_cache_files(str(tmp_path / "c"), {"rope": "linear:2"} if model == "longshort" else None, model)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # SqliteDict's thread, upstream
@pytest.mark.parametrize("kind", ["text", "folder"])
def test_a_user_file_or_folder_by_the_cache_name_is_refused_naming_it_and_kept(tmp_path, kind):
    """A file of the user's where lm-eval opens ``<use_cache>_rank0.db`` ended the run in sqlite's traceback."""
    db = tmp_path / "c_rank0.db"
    if kind == "text":
        db.write_text("my notes\n" * 20)
    else:
        db.mkdir()
        (db / "notes.txt").write_text("mine")
    before = db.read_text() if kind == "text" else (db / "notes.txt").read_text()
    with pytest.raises((sqlite3.DatabaseError, OSError)):  # upstream's own open of it, as lm-eval does
        with SqliteDict(str(db), autocommit=True) as d:
            d.get("x")
    with pytest.raises(ValueError) as refused:
        check_cache_files(str(tmp_path / "c"), None, "hf", busy_timeout=0.2)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"--use_cache: {db} is no response cache (")
    assert before == (db.read_text() if kind == "text" else (db / "notes.txt").read_text())
