"""A file of the user's at a name beside a command's output (``<path>.tmp``) is never touched by
:func:`output_guard.atomic_open` (every report, result and copied config): ``longshort-cp tiny/longshort_stdlib.yaml
run.yaml`` beside a user's plain ``run.yaml.tmp`` replaced it with the config, then removed it (exit 0); a link there
was refused (before that, written through). The temporary file is now a new one of the call's own
(``.run.yaml.<random>.tmp``, made with O_EXCL). A caller's own temporary name (``tmp=``, the BABILong generator's
``.<name>.partial``) that is a link is still refused, never written through nor spun on. The references: the bytes
and links the test wrote, ``os.readlink``, ``os.stat``'s mode against the umask."""

from __future__ import annotations

import os

import pytest

from bounded_child import run_bounded
from torchtune_longshort.output_guard import atomic_write_text
from torchtune_longshort.temporary_files import temporary_of


def test_a_users_files_at_the_old_temporary_name_are_kept_and_the_output_written(tmp_path):
    mine = tmp_path / "elsewhere" / "notes.txt"
    mine.parent.mkdir()
    mine.write_bytes(b"my own notes\n")
    (tmp_path / "run.yaml.tmp").write_bytes(b"mine\n")
    os.symlink(mine, tmp_path / "report.md.tmp")
    os.symlink(tmp_path / "gone.txt", tmp_path / "summary.json.tmp")
    for name in ("run.yaml", "report.md", "summary.json"):
        atomic_write_text(tmp_path / name, f"the command's {name}\n")
        assert (tmp_path / name).read_text() == f"the command's {name}\n" and not (tmp_path / name).is_symlink()
    assert (tmp_path / "run.yaml.tmp").read_bytes() == b"mine\n" and mine.read_bytes() == b"my own notes\n"
    assert os.readlink(tmp_path / "report.md.tmp") == str(mine)
    assert os.readlink(tmp_path / "summary.json.tmp") == str(tmp_path / "gone.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "report.md", "report.md.tmp", "run.yaml",
                                                          "run.yaml.tmp", "summary.json", "summary.json.tmp"]
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "run.yaml").stat().st_mode & 0o777 == 0o666 & ~mask  # as a plain open makes it


def test_the_temporary_file_is_the_calls_own_and_gone_after_a_failure(tmp_path):
    seen = []

    class Stop(Exception):
        pass

    from torchtune_longshort.output_guard import atomic_open

    with pytest.raises(Stop):
        with atomic_open(tmp_path / "run.yaml") as f:
            f.write("half")
            seen = [p.name for p in tmp_path.iterdir()]
            raise Stop
    assert len(seen) == 1 and temporary_of(seen[0]) == "run.yaml" and seen[0].startswith(".run.yaml.")
    assert list(tmp_path.iterdir()) == []


def test_a_link_at_a_callers_own_temporary_name_is_refused_not_spun_on(tmp_path):
    out = tmp_path / "qa1.jsonl"
    os.symlink(tmp_path / "gone.txt", tmp_path / ".qa1.jsonl.partial")
    code = ("import sys\nfrom pathlib import Path\nfrom torchtune_longshort.output_guard import atomic_open\n"
            "p = Path(sys.argv[1])\ntry:\n    with atomic_open(p, tmp=p.with_name('.qa1.jsonl.partial')) as f:\n"
            "        f.write('x')\nexcept FileExistsError as e:\n    print(e.strerror)\n")
    p = run_bounded(code, out, spun="atomic_open spun on a link to nothing")
    assert p.returncode == 0 and ".qa1.jsonl.partial is a symbolic link" in p.stdout, p.stdout + p.stderr
    assert os.readlink(tmp_path / ".qa1.jsonl.partial") == str(tmp_path / "gone.txt")
    assert not os.path.lexists(out) and not os.path.lexists(tmp_path / "gone.txt")


def test_a_killed_writes_temporary_file_in_a_run_folder_is_the_recipes(tmp_path):
    """What a kill mid-write of the recipe's ``latest`` leaves (the name atomic_open makes, caught here) is taken as
    the recipe's by its output folder's check; a user's hidden file of another name is not."""
    from torchtune_longshort.output_guard import atomic_open
    from torchtune_longshort.training.written_files import written_by_recipe

    with pytest.raises(KeyboardInterrupt):
        with atomic_open(tmp_path / "latest") as f:
            made = [p.name for p in tmp_path.iterdir()]
            f.write("step_2")
            raise KeyboardInterrupt
    assert len(made) == 1 and written_by_recipe(made[0])
    assert not written_by_recipe(made[0].replace("latest", "notes")) and not written_by_recipe(".latest.partial")
    # a step folder's exact name, and the <name>.tmp of older versions and atomic_torch_save, are the recipe's;
    # a user's step_notes is not (a hand mutant that took any step_* as the recipe's survived)
    assert written_by_recipe("step_12") and written_by_recipe("latest.tmp") and written_by_recipe("step_3.tmp")
    assert not written_by_recipe("step_notes") and not written_by_recipe("step_3b") and not written_by_recipe("step_")


def test_a_users_file_at_a_drawn_temporary_name_is_never_opened_and_a_failed_claim_leaves_none(tmp_path, monkeypatch):
    """The random name drawn is one a user's file already has: another is drawn (O_EXCL), the file untouched; a
    ``_claim`` that fails takes back the temporary file it was given. Hand mutants (no O_EXCL: the user's file
    truncated and written; no unlink on failure) survived the tests above."""
    from torchtune_longshort import temporary_files

    drawn = iter(["0000aaaa", "0000bbbb", "0000cccc"])
    monkeypatch.setattr(temporary_files.secrets, "token_hex", lambda n: next(drawn))
    (tmp_path / ".x.txt.0000aaaa.tmp").write_text("mine")
    tmp, f = temporary_files.new_temporary(tmp_path / "x.txt", "w")
    with f:
        f.write("the call's")
    assert tmp.name == ".x.txt.0000bbbb.tmp" and (tmp_path / ".x.txt.0000aaaa.tmp").read_text() == "mine"

    def claim(path):
        raise OSError("record full")

    with pytest.raises(OSError, match="record full"):
        temporary_files.new_temporary(tmp_path / "x.txt", "w", _claim=claim)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".x.txt.0000aaaa.tmp", ".x.txt.0000bbbb.tmp"]
