"""A data glob and the files a command writes: refused where the glob matches one of them (the next run reads it
back), not because the output lies somewhere below the glob's folder (``./**/*.txt`` beside ``.jsonl`` rows)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from torchtune_longshort.config.glob_match import glob_meets
from torchtune_longshort.eval.tasks.babilong import generator


def _files(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("pattern", ["./**/*.txt", "**/*.jsonl", "*/*/*.jsonl", "rows/*/qa[12].jsonl",
                                     "rows/0k/*", "*.json", "rows/*", "rows/**/.*.json", "[!r]*/*/*.txt", "**",
                                     "**/*.json", "a/**", "a/**/c.*", "**/b/*", "**/0k/**/qa1.jsonl", "x**/*.txt"])
def test_glob_meets_what_glob_itself_matches(tmp_path, monkeypatch, pattern):
    """The reference: ``glob.glob(recursive=True)`` (as the readers expand a data glob, ``datasets`` alike: ``**``
    any folders) over the written files made real."""
    monkeypatch.chdir(tmp_path)
    written = ["rows/0k/qa1.jsonl", "rows/.longshort_babilong.json", "out/log_1.txt", "a/b/c.txt", "top.json",
               "a/b/c.jsonl", "top.txt", "a/.h/d.txt", "a/b/e/f/g.json"]
    for w in written:
        Path(w).parent.mkdir(parents=True, exist_ok=True)
        Path(w).write_text("x")
    matched = {os.path.normpath(f) for f in glob.glob(pattern, recursive=True)}
    assert {w for w in written if glob_meets(pattern, w)} == {w for w in written if w in matched}


def test_a_folder_below_a_globs_folder_is_free_unless_the_glob_matches_the_rows(tmp_path, capsys, monkeypatch):
    """``--haystack './**/*.txt' --out books/rows`` was refused ('lies inside the folder of --haystack's matches'),
    though the rows are ``.jsonl`` files the glob never reads; ``--haystack '*/*/*.jsonl' --out rows`` was taken, and
    the next run read its own rows as haystack (the reference: ``glob.glob`` over the rows written)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "books" / "a").mkdir(parents=True)
    (tmp_path / "books" / "b.txt").write_text("a haystack line\n" * 50)
    (tmp_path / "books" / "a" / "c.jsonl").write_text('{"text": "a haystack line"}\n' * 50)
    generator.main(["--out", "books/rows", "--haystack", "./**/*.txt", "--lengths", "0k", "--n", "1", "--qa", "qa1"])
    assert "books/rows/0k/qa1.jsonl" in _files(tmp_path)
    assert glob.glob("./**/*.txt") == ["./books/b.txt"]  # what the haystack read; it never reads the rows
    before = _files(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        generator.main(["--out", "rows", "--haystack", "*/*/*.jsonl", "--lengths", "0k", "--n", "1", "--qa", "qa1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--out='rows' writes the rows as 'rows/0k/qa1.jsonl', which " \
        "--haystack='*/*/*.jsonl' matches" in err[0], err
    assert _files(tmp_path) == before
    Path("rows/0k").mkdir(parents=True)
    Path("rows/0k/qa1.jsonl").write_text("x")  # what that run would have written: the glob reads it
    assert "rows/0k/qa1.jsonl" in glob.glob("*/*/*.jsonl")


def test_the_recipe_refuses_a_data_glob_that_reads_its_log_back(tmp_path, capsys, monkeypatch):
    """``dataset.path='./**/*.txt'`` with the logs in ``output_dir`` trained, and the next run trained on the
    DiskLogger's ``log_<time>.txt`` (the reference: ``glob.glob`` over such a file)."""
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "b.txt").write_text("a line of text\n" * 200)
    base = ["tiny/longshort_stdlib.yaml", "dataset._component_=torchtune_longshort.data.corpus.local_text",
            "dataset.path=./**/*.txt", "~dataset.include_tests", "~dataset.split", "~validation",
            f"tokenizer.path={tmp_path / 'tok'}", "output_dir=out"]
    with pytest.raises(SystemExit) as e:  # books/ and logs/, not out/
        validate_main([*base, "dataset.path=./[bl]*/**/*.txt", "metric_logger.log_dir=logs"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "metric_logger.log_dir=" in err[0] and "/logs/**/*'" in err[0] \
        and "which dataset.path=" in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["books"]
    Path("out/logs").mkdir(parents=True)
    Path("out/logs/log_1.txt").write_text("x")  # the DiskLogger's file in its default folder, out/logs
    assert "./out/logs/log_1.txt" in glob.glob("./**/*.txt", recursive=True)  # as datasets reads ** too
    os.remove("out/logs/log_1.txt")
    os.removedirs("out/logs")
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # the logs in out/logs: ./**/*.txt reads them (it read one name deep)
        validate_main(base)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "which dataset.path=" in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["books"]
    assert validate_main([*base, "dataset.path=./books/**/*.txt"]) == 0  # a glob that never reaches out/
