"""A data glob's ``**`` is any folders, none included, as ``datasets``' ``data_files`` and
``glob.glob(p, recursive=True)`` read it: ``dataset.path: './**/*.txt'`` read only ``./*/*.txt`` (``./notes.txt`` and
deeper files left out without a word), and a command's output deeper than one folder was not refused though the next
run's glob reads it back."""

from __future__ import annotations

import glob
import os
import signal
from pathlib import Path

import pytest

from torchtune_longshort.data.data_files import named_path
from torchtune_longshort.data.file_paths import resolve_files
from torchtune_longshort.eval.tasks.babilong import generator


def _tree(root: Path) -> None:
    for rel in ("notes.txt", "a/x.txt", "a/b/y.txt", "a/b/c/z.txt", ".hid/h.txt", "a/.h.txt", "a/b/w.json"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("a line\n")


@pytest.mark.parametrize("pattern", ["./**/*.txt", "**/*.txt", "a/**/*.txt", "**/b/*", "a/**", "**"])
def test_readers_expand_a_glob_as_glob_recursive(tmp_path, monkeypatch, pattern):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path)
    expected = sorted(os.path.normpath(f) for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
    assert [os.path.normpath(f) for f in resolve_files(pattern, (".txt", ".json"), "dataset.path")] == expected


def test_a_glob_whose_only_matches_are_no_folder_deep_is_taken(tmp_path, monkeypatch):
    """``dataset.path='./**/*.txt'`` beside ``notes.txt`` alone: refused as naming nothing ('does not exist')."""
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("a line\n")
    assert glob.glob("./**/*.txt", recursive=True) == ["./notes.txt"]
    assert named_path({"path": "./**/*.txt"}, "dataset") == [("dataset.path", Path("./**/*.txt"))]


def test_the_generator_refuses_rows_a_deep_glob_reads_back(tmp_path, capsys, monkeypatch):
    """``--haystack './**/*.jsonl' --out deep/rows`` was taken (``**`` one name: ``./*/*.jsonl``), and the next run
    read ``deep/rows/0k/qa1.jsonl`` back as haystack (the reference: ``glob.glob(recursive=True)`` over such a
    file)."""
    monkeypatch.chdir(tmp_path)
    Path("books").mkdir()
    Path("books/b.jsonl").write_text('{"text": "a haystack line"}\n' * 50)
    with pytest.raises(SystemExit) as e:
        generator.main(["--out", "deep/rows", "--haystack", "./**/*.jsonl", "--lengths", "0k", "--n", "1",
                        "--qa", "qa1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--out='deep/rows' writes the rows as 'deep/rows/0k/qa1.jsonl'" \
        in err[0] and "--haystack=" in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["books"]
    Path("deep/rows/0k").mkdir(parents=True)
    Path("deep/rows/0k/qa1.jsonl").write_text("x")
    assert "./deep/rows/0k/qa1.jsonl" in glob.glob("./**/*.jsonl", recursive=True)


@pytest.mark.parametrize("links", [{"books/sub/loop": ".."}, {"books/sub/loop": "..", "books/sub/c/up": "../../sub"}])
@pytest.mark.parametrize("pattern", ["books/**/*.txt", "**/*.txt", "books/**"])
def test_a_deep_glob_through_a_link_loop_reads_each_file_once(tmp_path, monkeypatch, pattern, links):
    """``dataset.path='books/**/*.txt'`` over ``books/sub/loop -> ..`` read ``a.txt`` and ``sub/b.txt`` 41 times each
    (``sub/loop/sub/loop/.../a.txt``, until the path no longer resolves); with a second such link it never ended.
    The reference: ``datasets``' own ``data_files`` resolution of the pattern, which reads each file once."""
    from datasets.data_files import resolve_pattern

    monkeypatch.chdir(tmp_path)
    for rel in ("books/a.txt", "books/sub/b.txt", "books/sub/c/d.txt"):
        Path(rel).parent.mkdir(parents=True, exist_ok=True)
        Path(rel).write_text("a line\n")
    for link, target in links.items():
        os.symlink(target, link)
    expected = sorted(os.path.relpath(f, tmp_path) for f in resolve_pattern(pattern, base_path=str(tmp_path)))

    def too_long(*_):
        raise RuntimeError(f"{pattern} still expanding after 3 s")  # no OSError: glob swallows those

    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(3)
    try:
        got = sorted(os.path.normpath(f) for f in resolve_files(pattern, (".txt",), "dataset.path"))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert got == expected


@pytest.mark.parametrize("pattern", ["**/*.txt", "./**/*.txt", "*/**/*.txt", "a*/**/*.txt", "a/b/**/*.txt"])
def test_a_deep_glob_lists_no_folder_glob_does_not(tmp_path, monkeypatch, pattern):
    """``**/*.md`` beside a ``.venv/`` walked all of it (11 s where glob took 0.06 s) to read no file there, and
    ``a*/**/*.txt`` every folder beside ``a``. The reference: the folders ``glob.glob(recursive=True)`` itself lists,
    and the files it finds."""
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path)
    for rel in (".venv/lib/site/m.txt", "zzz/deep/q.txt"):
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_text("a line\n")
    listed, scandir = [], os.scandir

    def recorded(path="."):
        listed.append(os.path.realpath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", recorded)
    expected = sorted(os.path.normpath(f) for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
    by_glob, listed[:] = set(listed), []
    got = [os.path.normpath(f) for f in resolve_files(pattern, (".txt",), "dataset.path")]
    assert got == expected and set(listed) <= by_glob, sorted(set(listed) - by_glob)
