"""A run's start or overwrite killed (or failed) part-way, and what the next start does with what it left: the
folder stays the recipe's, the earlier run is put back whole, and a user's file in its place is refused, never
deleted. (Split out of test_step_folder_user_files.py.)"""

from __future__ import annotations

import pytest
from run_folders import commit_step, recipe_made, tree


def test_an_overwrite_killed_part_way_leaves_a_folder_the_next_overwrite_takes(tmp_path, tiny_llama2_dir, monkeypatch):
    """``overwrite_output_dir`` deletes an earlier run entry by entry; killed after any number of them (a multi-GB
    shard takes seconds), what is left is still the recipe's: the states go before the step folders (a state is the
    recipe's only beside its step folder's list), each folder's list last of it, the marker last of all."""
    import shutil

    from torchtune_longshort.training import output_aside as oa
    from torchtune_longshort.training import output_dir as od
    from torchtune_longshort.training.written_files import record_written

    run = recipe_made(tmp_path / "run")
    for step in (2, 4):
        commit_step(run, step, tiny_llama2_dir)
    (run / "logs").mkdir()
    (run / "logs" / "log_1.txt").write_text("log")
    record_written(run, ("logs",))
    remove, cuts = od._remove, 0
    while True:
        copy = tmp_path / f"cut{cuts}"
        shutil.copytree(run, copy, symlinks=True)
        done = []

        def killed(path, n=cuts):
            if len(done) == n:
                raise KeyboardInterrupt  # the kill, before this entry goes
            done.append(path)
            remove(path)

        monkeypatch.setattr(od, "_remove", killed)
        monkeypatch.setattr(oa, "remove_tree", killed)  # its recursion: every entry goes through the kill
        try:
            od.prepare_output_dir(copy, resume=False, overwrite=True, written_here=("logs",))
            break  # every entry went: no cut left to try
        except KeyboardInterrupt:
            pass
        monkeypatch.setattr(od, "_remove", remove)
        od.check_output_dir(copy, resume=False, overwrite=True, written_here=("logs",))  # the next overwrite: taken
        cuts += 1
    monkeypatch.setattr(od, "_remove", remove)
    assert cuts > 20 and sorted(p.name for p in copy.iterdir()) == [".longshort_output"]


def test_a_setup_that_failed_before_its_logs_were_listed_leaves_no_folder(tmp_path):
    """A disk that filled while the run set up (its logger had made logs/ and a file, the list of them not written
    yet): the folder the run made goes, so that the rerun the refusal asks for starts as the first would have; a
    folder it did not make stays."""
    from torchtune_longshort.training.output_dir import claim_output_dir

    for made in (True, False):
        out = tmp_path / f"made_{made}"
        if not made:
            out.mkdir()
        lock = claim_output_dir(out, resume=False, overwrite=False, written_here=("logs",))
        (out / "logs").mkdir()
        (out / "logs" / "log_1.txt").write_text("first lines")
        lock.release(discard=True)
        assert out.exists() != made


def _killed_overwrite_start(run, tiny_llama2_dir, listed):
    """``run`` as an overwrite start killed (SIGKILL) once its logger had started leaves it: the earlier run in
    ``.replaced``, the killed logger's ``logs/log_2.txt`` (``listed``: in its ``.longshort_files``, as the start
    writes at once after the logger's start), a stale lock. Returns the earlier run's tree."""
    import subprocess

    from torchtune_longshort.output_guard import write_names
    from torchtune_longshort.training.output_dir import REPLACED

    commit_step(run, 4, tiny_llama2_dir)
    (run / "logs").mkdir()
    (run / "logs" / "log_1.txt").write_text("earlier")
    write_names(run / "logs" / ".longshort_files", ["log_1.txt"])
    before = tree(run)
    (run / REPLACED).mkdir()
    for p in list(run.iterdir()):
        if p.name not in (REPLACED, ".longshort_output"):
            p.rename(run / REPLACED / p.name)
    (run / "logs").mkdir()
    (run / "logs" / "log_2.txt").write_text("the killed start's")
    if listed:
        write_names(run / "logs" / ".longshort_files", ["log_2.txt"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    (run / ".lock").write_text(f"{dead.pid}\n")
    return before


@pytest.mark.parametrize("resume", [True, False], ids=["resume", "overwrite"])
def test_an_overwrite_start_killed_while_its_logger_started_is_mended_by_the_next_start(tmp_path, tiny_llama2_dir,
                                                                                       resume):
    """SIGKILL while an overwrite start opened its logger left the earlier run in ``.replaced``, the killed logger's
    ``logs/`` and a stale lock: resume=True was refused ("no complete step_<k>"), and overwrite refused on
    ``logs/ (no .longshort_files)``, then deleted ``.replaced`` unasked. Now the next start (taking the stale lock)
    puts the earlier run back, whole, before its checks: resume continues it, overwrite replaces it as if never
    started."""
    from torchtune_longshort.training.output_dir import check_output_dir, claim_output_dir

    run = recipe_made(tmp_path / "run")
    before = _killed_overwrite_start(run, tiny_llama2_dir, listed=True)
    with pytest.raises(FileExistsError, match="exists and is not empty.* Pass resume=True to continue that run"):
        # without overwrite: refused, mended or not; the step set aside is one to resume
        check_output_dir(run, resume=False, overwrite=False, written_here=("logs",))
    lock = claim_output_dir(run, resume=resume, overwrite=not resume, written_here=("logs",))
    assert tree(run) == sorted(before + [".lock"]) and (run / "logs" / "log_1.txt").read_text() == "earlier"
    lock.release()


@pytest.mark.parametrize("resume", [True, False], ids=["resume", "overwrite"])
@pytest.mark.parametrize("note", [True, False], ids=["users_note", "unlisted_log"])
def test_a_users_file_where_a_killed_start_set_the_earlier_run_aside_is_refused_not_deleted(
        tmp_path, tiny_llama2_dir, resume, note):
    """The next start put the earlier run back by deleting whatever stood in its place: a note the user put into the
    killed start's ``logs/`` was lost (before: ``tune run`` on the tiny config, its logger killed by SIGKILL, a
    ``logs/notes.txt`` added, then the overwrite rerun: trained, ``notes.txt`` gone). A file there that no list
    names (the user's, or the killed logger's own when killed before it was listed) is refused by name now, before
    anything moves or a lock stays; once the user clears the folder, the next start mends as before."""
    import shutil

    from torchtune_longshort.training.output_dir import claim_output_dir

    run = recipe_made(tmp_path / "run")
    before = _killed_overwrite_start(run, tiny_llama2_dir, listed=note)
    if note:
        (run / "logs" / "notes.txt").write_text("mine")
    left = [p for p in tree(run) if p != ".lock"]
    named = "logs/notes.txt" if note else "logs/log_2.txt"
    with pytest.raises(FileExistsError, match=rf"holds '.*/run/.replaced', the earlier run an overwrite start that "
                                              rf"was killed set aside, and in its place '{named}', which no run "
                                              r"listed as its own: move what you keep out of '.*/run/logs'"):
        claim_output_dir(run, resume=resume, overwrite=not resume, written_here=("logs",))
    assert tree(run) == left and (not note or (run / "logs" / "notes.txt").read_text() == "mine")
    shutil.rmtree(run / "logs")
    claim_output_dir(run, resume=resume, overwrite=not resume, written_here=("logs",)).release()
    assert tree(run) == before


@pytest.mark.parametrize("resume", [True, False], ids=["resume", "overwrite"])
def test_a_users_file_in_the_folder_a_killed_start_set_the_earlier_run_aside_in_stays_there(
        tmp_path, tiny_llama2_dir, resume):
    """A file the user put into ``.replaced/`` (beside the earlier run a killed overwrite start set aside there) was
    moved to the top of the run folder by the next start's mend, then named there by the overwrite's refusal
    ("refuses to delete output_dir=...: it holds 'notes.txt'"). Now it is refused where it lies, before anything
    moves: the folder's tree is as the user left it."""
    from torchtune_longshort.training.output_dir import claim_output_dir

    run = recipe_made(tmp_path / "run")
    _killed_overwrite_start(run, tiny_llama2_dir, listed=True)
    (run / ".replaced" / "notes.txt").write_text("mine")
    left = [p for p in tree(run) if p != ".lock"]
    with pytest.raises(FileExistsError, match=r"holds '.replaced/notes.txt', which this recipe did not write, .*: "
                                              r"move it out of '.*/run/.replaced'"):
        claim_output_dir(run, resume=resume, overwrite=not resume, written_here=("logs",))
    assert [p for p in tree(run) if p != ".lock"] == left and (run / ".replaced" / "notes.txt").read_text() == "mine"


def test_what_the_folder_checks_take_as_the_recipes_in_a_hand_built_folder(tmp_path):
    """``written_files``' checks on a folder built by hand (no run, no model): a link named ``latest`` is of another
    kind; with the logger writing into the output folder itself and no list there, a user's note is foreign; a
    killed write of the top list is removed, and one beside the list of a log folder that is a link to a user's
    folder is not. Hand mutants of each of those checks survived the run-level tests."""
    import os

    from torchtune_longshort.training.written_files import (
        HERE, entries_of_another_kind, foreign_written, remove_killed_writes,
    )

    out, theirs = tmp_path / "run", tmp_path / "theirs"
    out.mkdir(), theirs.mkdir()
    (theirs / "step.txt").write_text("step_2")
    os.symlink(theirs / "step.txt", out / "latest")
    assert entries_of_another_kind(out) == ["latest"] and entries_of_another_kind(out, resume=True) == ["latest"]
    os.unlink(out / "latest")
    (out / "notes.txt").write_text("mine")
    assert foreign_written(out, (HERE,)) == ["notes.txt"]
    for folder in (out, theirs):
        (folder / "..longshort_files.0123abcd.tmp").write_text("half")
    os.symlink(theirs, out / "logs")
    assert remove_killed_writes(out, ("logs",)) == ["..longshort_files.0123abcd.tmp"]
    assert sorted(os.listdir(theirs)) == ["..longshort_files.0123abcd.tmp", "step.txt"]
    assert sorted(os.listdir(out)) == ["logs", "notes.txt"]
