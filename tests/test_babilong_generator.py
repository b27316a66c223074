"""The BABILong generator's command and its files: bad input refused before anything is written (a length, depth or
comma list the task would not read, an unreadable haystack or tokenizer, an --out it cannot write, a file it did not
write), a local text haystack and one much shorter than the length, and a stopped run (its list of files, its one
line). The samples' lengths, depths and answers, the loader and the task end to end are test_babilong.py's. Split
from test_babilong.py."""

from __future__ import annotations

import json
import os
import random

import pytest

from torchtune_longshort.eval.tasks.babilong import task as bl
from torchtune_longshort.eval.tasks.babilong import generator as gen
from torchtune_longshort.eval.tasks.babilong import haystack
from torchtune_longshort.eval.tasks.babilong import stories


def test_generator_bad_input(sp_tokenizer_dir):
    rng = random.Random(0)
    count = haystack.load_token_counter(str(sp_tokenizer_dir))
    lines = haystack.iter_haystack_lines("stdlib")
    story = stories.make_story("qa3", rng)
    with pytest.raises(ValueError, match="length='3k'.*accepted"):
        haystack.build_sample(story, "3k", lines, count, rng)
    with pytest.raises(ValueError, match="0k' has no haystack"):
        haystack.build_sample(story, "0k", lines, count, rng, depth=50)
    with pytest.raises(ValueError, match="depth=150"):
        haystack.build_sample(story, "1k", lines, count, rng, depth=150)
    long_story = stories.Story("qa1", ["Mary went to the kitchen."] * 400, "Where is Mary?", "kitchen")
    with pytest.raises(ValueError, match=r"length='1k' \(1024 tokens\) is too short for this qa1 story"):
        haystack.build_sample(long_story, "1k", lines, count, rng)
    with pytest.raises(ValueError, match="qa='qa6'"):
        stories.make_story("qa6", rng)
    with pytest.raises(ValueError, match="tokenizer is required"):
        gen.generate("/nonexistent", lengths=["1k"], n=1)


def test_the_generator_refuses_0k_among_lengths_with_depths_as_it_refuses_0k_alone(tmp_path, sp_tokenizer_dir,
                                                                                    capsys):
    # --lengths 0k,1k --depths 0,50 wrote 1k/ alone (0k dropped, one stderr line), where --lengths 0k --depths 0,50
    # was refused: both are now refused before anything is written, the command naming its own flags
    for lengths in (["0k", "1k"], ["1k", "0k"], ["0k"]):
        with pytest.raises(ValueError, match=r"'0k' has no haystack to put the facts at a depth in"):
            gen.generate(tmp_path / "d", ["qa1"], lengths, n=1, depths=[0, 50], tokenizer=str(sp_tokenizer_dir))
        assert not os.path.exists(tmp_path / "d")
    with pytest.raises(SystemExit) as ended:
        gen.main(["--out", str(tmp_path / "c"), "--tokenizer", str(sp_tokenizer_dir), "--lengths", "0k,1k",
                  "--depths", "0,50", "--n", "1", "--qa", "qa1"])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and not os.path.exists(tmp_path / "c"), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "--lengths 0k,1k with --depths 0,50: 0k has no haystack" in err and "without --depths" in err, err
    # 0k alone without depths, and the depth lengths without 0k, go into one folder (the task reads both)
    gen.generate(tmp_path / "d", ["qa1"], ["0k"], n=1, tokenizer=str(sp_tokenizer_dir))
    gen.generate(tmp_path / "d", ["qa1"], ["1k"], n=1, depths=[50], tokenizer=str(sp_tokenizer_dir))
    rows = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "d").glob("*/qa1.jsonl")}
    assert sorted(rows) == ["0k", "1k"] and rows["0k"]["depth"] is None and rows["1k"]["depth"] == 50


def test_the_generator_writes_only_depths_the_task_reads(tmp_path, sp_tokenizer_dir, capsys):
    # --depths 10 wrote rows at depth 10, exit 0, which the longshort_babilong task then refused as data ('depth=10;
    # accepted: [0, 25, 50, 75, 100] or null': no score at that length); the generator now refuses such a depth up
    # front. The task's own loader is the reference for which depths are read.
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

    def task_reads(depth):
        (tmp_path / "hand" / "1k").mkdir(parents=True, exist_ok=True)
        row = {"input": "Mary went to the kitchen.", "question": "Where is Mary?", "target": "kitchen",
               "depth": depth}
        (tmp_path / "hand" / "1k" / "qa1.jsonl").write_text(json.dumps(row) + "\n")
        try:
            bl.load_babilong("qa1", "1k", str(tmp_path / "hand"), "error")
        except TaskDataError:
            return False
        return True

    tok = ["--tokenizer", str(sp_tokenizer_dir), "--lengths", "1k", "--n", "1", "--qa", "qa1"]
    for depth in (10, 99):
        assert not task_reads(depth)
        with pytest.raises(SystemExit) as ended:
            gen.main(tok + ["--out", str(tmp_path / "o"), "--depths", f"0,{depth}"])
        err = capsys.readouterr().err
        assert ended.value.code == 2 and err.count("\n") == 1 and not os.path.exists(tmp_path / "o"), err
        assert f"--depths 0,{depth}: {depth} is not a depth the longshort_babilong tasks score" in err, err
        with pytest.raises(ValueError, match=f"depths=\\[{depth}\\]: {depth} is not a depth"):
            gen.generate(tmp_path / "o", ["qa1"], ["1k"], n=1, depths=[depth], tokenizer=str(sp_tokenizer_dir))
    assert task_reads(25)
    assert gen.main(tok + ["--out", str(tmp_path / "o"), "--depths", "25"]) == 0
    assert [r["depth"] for r in bl.load_babilong("qa1", "1k", str(tmp_path / "o"), "error")["qa1"]] == [25]


def test_the_generator_reads_its_comma_lists_as_the_task_and_the_study_do(tmp_path, sp_tokenizer_dir, capsys):
    # --qa 'qa1, qa2' was refused (qa=' qa2'), though the study takes eval.babilong.qa: "qa1, qa2" and passed it on
    # as it is (refused after the training) and the task reads max_seq_lengths "0k, 1k"; a name given twice wrote its
    # file twice (--depths 50,50: 2n rows at 50). Names are now stripped and each kept once; none is refused.
    from torchtune_longshort.study import values

    qa, lengths = "qa1, qa2,qa1", "0k, 0k"
    assert values.qa_tasks("eval.babilong.qa", qa) == qa and bl.parse_lengths(lengths) == ["0k", "0k"]
    assert gen.main(["--out", str(tmp_path / "o"), "--lengths", lengths, "--qa", qa, "--n", "2"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "o" / "0k" / f"{q}.jsonl") for q in ("qa1", "qa2")]
    for q in ("qa1", "qa2"):
        assert [json.loads(x)["qa"] for x in (tmp_path / "o" / "0k" / f"{q}.jsonl").read_text().splitlines()] == [q] * 2
    assert gen.main(["--out", str(tmp_path / "d"), "--tokenizer", str(sp_tokenizer_dir), "--lengths", "1k", "--qa",
                     "qa1", "--n", "1", "--depths", "50, 50"]) == 0
    rows = (tmp_path / "d" / "1k" / "qa1.jsonl").read_text().splitlines()
    assert [json.loads(x)["depth"] for x in rows] == [50]
    capsys.readouterr()
    for flag in ("--qa", "--lengths"):
        with pytest.raises(SystemExit) as ended:
            gen.main(["--out", str(tmp_path / "e"), flag, " , "])
        err = capsys.readouterr().err
        names = ", ".join(stories.QA_TASKS if flag == "--qa" else haystack.LENGTHS)
        assert ended.value.code == 2 and err == f"{gen.PROG}: error: {flag}=' , ': name at least one of {names}\n", err
    assert not os.path.exists(tmp_path / "e")


def test_local_text_haystack(tmp_path, sp_tokenizer_dir):
    (tmp_path / "book.txt").write_text("It was a dark and stormy night.\n" * 50)
    gen.generate(tmp_path / "out", qa_tasks=["qa1"], lengths=["1k"], n=1, tokenizer=str(sp_tokenizer_dir),
                 haystack=str(tmp_path / "book.txt"))
    row = json.loads((tmp_path / "out" / "1k" / "qa1.jsonl").read_text())
    assert "stormy night" in row["input"]
    with pytest.raises(FileNotFoundError, match="haystack="):
        next(haystack.iter_haystack_lines(str(tmp_path / "nope")))



def test_the_help_says_haystack_takes_a_glob_and_its_example_reads(tmp_path, capsys, monkeypatch):
    """--help said "stdlib | pg19 | path to .txt file or folder": no glob, which --haystack takes (** any folders)."""
    import glob
    import re

    with pytest.raises(SystemExit):
        gen.main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    entry = said.split("--haystack HAYSTACK ", 1)[1].split(" --seed", 1)[0]
    example = re.search(r"'([^']*\*\*[^']*)'", entry)
    assert "glob" in entry and example, entry
    monkeypatch.chdir(tmp_path)
    for path in (tmp_path / "books" / "top.txt", tmp_path / "books" / "x" / "y" / "deep.txt"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{path.stem} line\n")
    matched = sorted(os.path.basename(p) for p in glob.glob(example.group(1), recursive=True))
    assert matched == ["deep.txt", "top.txt"]  # the reference: ** is any folders, none included
    lines = haystack.iter_haystack_lines(example.group(1))
    assert sorted(next(lines) for _ in range(2)) == ["deep line", "top line"]


def test_a_haystack_that_gives_no_text_is_refused_naming_the_flag(tmp_path, capsys, monkeypatch):
    """A --haystack glob that matched nothing was refused as "haystack='./**/*.md' does not exist ...", naming no
    flag (the generator's other refusals name --out, --tokenizer, --depths as typed); so were an empty file and a
    folder without .txt files."""
    import glob

    monkeypatch.chdir(tmp_path)
    (tmp_path / "md").mkdir()
    (tmp_path / "md" / "a.md").write_text("some text\n")
    (tmp_path / "empty.txt").write_text("")
    assert glob.glob("./**/*.nope", recursive=True) == [] and os.path.getsize("empty.txt") == 0  # the references
    assert not glob.glob("md/*.txt")
    for typed in ("./**/*.nope", "empty.txt", "md"):
        with pytest.raises(SystemExit) as exit_info:
            gen.main(["--out", "o", "--lengths", "0k", "--n", "1", "--qa", "qa1", "--haystack", typed])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1, err
        assert err.split(": error: ", 1)[1].startswith(f"--haystack={typed!r} "), err
    assert sorted(os.listdir(tmp_path)) == ["empty.txt", "md"]  # refused before any write


def test_a_haystack_much_shorter_than_the_length_is_warned_about(tmp_path, sp_tokenizer_dir, capsys):
    """A 2-byte haystack built samples of the same 2 bytes repeated about a thousand times without a word: one line
    says how many times; a haystack longer than the length says nothing."""
    (tmp_path / "two.txt").write_text("ab")
    gen.generate(tmp_path / "short", qa_tasks=["qa1"], lengths=["1k", "2k"], n=1, tokenizer=str(sp_tokenizer_dir),
                 haystack=str(tmp_path / "two.txt"))
    tokens = haystack.load_token_counter(str(sp_tokenizer_dir))("ab")  # the reference: the text's own token count
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    # named as the refusals name the flag (--haystack='...'); it said "haystack '...'" (leftalone46)
    assert err == [f"babilong generator: warning: --haystack='{tmp_path / 'two.txt'}' holds {tokens} tokens, much "
                   f"shorter than the longest length asked (2048 tokens): a sample repeats it about "
                   f"{round(2048 / tokens)} times; name a longer text"], err
    (tmp_path / "book.txt").write_text("".join(f"Line {i} of a long enough book.\n" for i in range(600)))
    gen.generate(tmp_path / "long", qa_tasks=["qa1"], lengths=["1k"], n=1, tokenizer=str(sp_tokenizer_dir),
                 haystack=str(tmp_path / "book.txt"))
    assert "warning" not in capsys.readouterr().err


def test_generator_overwrites_only_its_own_files_and_refuses_before_writing(tmp_path, sp_tokenizer_dir, capsys):
    """The generator opened <out>/<length>/<qa>.jsonl for writing before anything else: a user's file of that name
    was overwritten, and a haystack that could not be read emptied an earlier file, then a traceback. Now a file it
    did not write is refused by name, bad input is one line before any write, and its own files are replaced."""
    args = ["--tokenizer", str(sp_tokenizer_dir), "--lengths", "1k", "--n", "1", "--qa", "qa1"]
    mine = tmp_path / "mine"
    (mine / "1k").mkdir(parents=True)
    (mine / "1k" / "qa1.jsonl").write_text("my rows\n")
    broken = tmp_path / "broken"  # a user's file by the list's name, and one by a killed write's: deleted, written over
    (broken / "1k").mkdir(parents=True)
    (broken / gen.WRITTEN).write_text("[")
    (broken / "1k" / ".qa1.jsonl.partial").write_text("mine\n")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / gen.WRITTEN).symlink_to(tmp_path / "gone")  # a link to nothing by the list's name
    cases = [(["--out", str(mine)], "holds '1k/qa1.jsonl', which no earlier run there wrote"),
             (["--out", str(broken)], f"holds {gen.WRITTEN}, which is no JSON list of names"),
             (["--out", str(tmp_path / "linked")], f"holds {gen.WRITTEN}, which is no JSON list of names"),
             (["--out", str(tmp_path / "o"), "--haystack", str(tmp_path / "absent.txt")], "haystack="),
             (["--out", str(tmp_path / "o"), "--tokenizer", str(tmp_path / "absent_tok")],
              "absent_tok': no tokenizer file or folder there: name a tokenizer folder or file"),
             (["--out", "/proc/longshort_x"], "cannot be created"),
             (["--out", "/proc"], "--out='/proc' does not take new files"),  # an OSError traceback at its first file
             # a depth past 100 was refused by the first sample, after the folder's list and a .partial file
             (["--out", str(tmp_path / "o"), "--depths", "0,101"],
              "--depths 0,101: 101 is not a depth the longshort_babilong tasks score")]
    for extra, needle in cases:
        with pytest.raises(SystemExit) as exit_info:
            gen.main(args + extra)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert (mine / "1k" / "qa1.jsonl").read_text() == "my rows\n" and sorted(os.listdir(tmp_path)) == ["broken", "linked", "mine"]
    assert (broken / gen.WRITTEN).read_text() == "[" and os.listdir(broken / "1k") == [".qa1.jsonl.partial"]
    out = tmp_path / "o"
    out.mkdir()
    (out / gen.WRITTEN).write_text("")  # empty: a run killed between the list's create and its write; not refused
    assert gen.main(args + ["--out", str(out)]) == 0
    first = (out / "1k" / "qa1.jsonl").read_text()
    with pytest.raises(SystemExit):  # an unreadable haystack: the earlier file stays whole
        gen.main(args + ["--out", str(out), "--haystack", str(tmp_path / "absent.txt")])
    assert (out / "1k" / "qa1.jsonl").read_text() == first
    assert gen.main(args + ["--out", str(out), "--seed", "7"]) == 0  # its own file: replaced
    assert (out / "1k" / "qa1.jsonl").read_text() != first and sorted(os.listdir(out / "1k")) == ["qa1.jsonl"]


def test_a_stopped_generator_lists_only_the_files_it_wrote(tmp_path, sp_tokenizer_dir, monkeypatch):
    """Each file is listed as the generator's before it is written (a killed run's part is its own). A stop while
    qa2.jsonl was written left qa2 listed, never written: a file of the user's put there then was overwritten by the
    next run; now the stop takes that name off the list, and the user's file is refused."""
    real, calls = gen.build_sample, []

    def stop_at_the_second_file(story, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(story, *args, **kwargs)

    monkeypatch.setattr(gen, "build_sample", stop_at_the_second_file)
    out = tmp_path / "o"
    with pytest.raises(KeyboardInterrupt):
        gen.generate(out, ["qa1", "qa2"], ["1k"], n=1, tokenizer=str(sp_tokenizer_dir))
    assert sorted(os.listdir(out / "1k")) == ["qa1.jsonl"] and gen._written(out) == ["1k/qa1.jsonl"]
    (out / "1k" / "qa2.jsonl").write_text("my rows\n")
    monkeypatch.setattr(gen, "build_sample", real)
    with pytest.raises(FileExistsError, match="holds '1k/qa2.jsonl', which no earlier run there wrote"):
        gen.generate(out, ["qa1", "qa2"], ["1k"], n=1, tokenizer=str(sp_tokenizer_dir))
    assert (out / "1k" / "qa2.jsonl").read_text() == "my rows\n"


def test_a_stopped_generator_ends_in_one_line(monkeypatch, capsys):
    # Ctrl-C / SIGTERM mid-generation ended in a KeyboardInterrupt traceback (SIGTERM: silently, exit -15)
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gen, "generate", stopped)
    with pytest.raises(SystemExit) as exit_info:
        gen.main(["--tokenizer", "x", "--out", "o"])
    assert exit_info.value.code == 130
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "generator: interrupted (SIGINT): each file written so far is whole; the same command writes them all again")


def test_a_skipped_haystack_record_is_warned_about_naming_the_flag(monkeypatch, caplog):
    """A PG19 record the haystack could not read was warned about as "haystack 'pg19': skipped an unreadable record",
    while the generator's refusals name the flag as typed (--haystack='pg19'); now the warning does too. It was said
    again on every pass over the haystack (cycled), each time "(1 so far)": now once."""
    from torchtune_longshort.data.text_files import SkippedRecord

    monkeypatch.setattr(haystack.corpus, "pg19", lambda **kw: lambda: iter(["a line", SkippedRecord("record 1: x")]))
    with caplog.at_level("WARNING"):
        lines = haystack.iter_haystack_lines("pg19", label="--haystack")
        assert [next(lines) for _ in range(3)] == ["a line"] * 3  # the skipped record gives no line
    said = [r.getMessage() for r in caplog.records if "skipped an unreadable record" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "--haystack='pg19': skipped an unreadable record (1 so far): record 1: x"), said
