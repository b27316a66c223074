"""A run killed inside a whole-file write of its output folder (``latest`` just before its rename, a log folder's list
of files) leaves the writer's temporary file, ``.<name>.<8 hex>.tmp``; ``atomic_open`` removes one only at the next
write of the same file once it is a day old, so a resumed run kept it. The resume now removes those of the recipe's
own files under the folder's lock (no other process writes them then) once its setup has passed its checks
(``OutputDirLock.clear_earlier_run``), in one line; a user's file that only looks like one stays, and a resume refused
after its claim leaves them (it removed them as it took the lock, then refused: a side effect before a refusal).

Reference: the temporary files are made by the writer's own naming function
(:func:`torchtune_longshort.temporary_files.new_temporary`)."""

from __future__ import annotations

from run_folders import commit_step, recipe_made
from torchtune_longshort.temporary_files import new_temporary
from torchtune_longshort.training.output_dir import claim_output_dir


def _left(path):
    """What a writer of ``path`` killed before its rename leaves."""
    tmp, f = new_temporary(path, "w")
    f.write("step_2\n")
    f.close()
    return tmp


def test_a_resume_removes_the_temporary_files_a_killed_write_left_and_no_user_file(tmp_path, tiny_llama2_dir,
                                                                                      capsys):
    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    (run / "logs").mkdir()
    (run / "logs" / ".longshort_files").write_text("[]\n")
    left = [_left(run / "latest"), _left(run / "logs" / ".longshort_files")]
    assert all(p.is_file() for p in left) and len({p.parent for p in left}) == 2
    mine = [run / (left[0].name + ".bak"), run / left[0].name.upper(), run / ".notes.1a2b3c4d.tmp",
            run / "logs" / left[1].name[1:]]  # look-alikes: a suffix, upper-case hex, a name it does not write, one dot
    for p in mine:
        p.write_text("mine\n")
    capsys.readouterr()
    lock = claim_output_dir(run, resume=True, overwrite=False, written_here=("logs",))
    lock.clear_earlier_run()  # the setup passed: the run's first write
    lock.release()
    assert [p for p in left if p.exists()] == []
    assert [p.read_text() for p in mine] == ["mine\n"] * len(mine)
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("removed 2 temporary files that a run killed while writing"), said
    assert left[0].name in said[0] and f"logs/{left[1].name}" in said[0], said


def test_a_resume_with_no_killed_write_says_nothing(tmp_path, tiny_llama2_dir, capsys):
    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    capsys.readouterr()
    lock = claim_output_dir(run, resume=True, overwrite=False)
    lock.clear_earlier_run()
    lock.release()
    assert capsys.readouterr().err == ""


def test_a_resume_refused_after_its_claim_leaves_them(tmp_path, tiny_llama2_dir, capsys):
    """The claim, then a refusal of the setup (a bad line of metrics.jsonl: the recipe's setup releases the lock
    with discard=True): before, 'removed 1 temporary file ...' was said and the file gone, then the run refused."""
    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    left = _left(run / "latest")
    capsys.readouterr()
    claim_output_dir(run, resume=True, overwrite=False).release(discard=True)
    assert left.is_file() and capsys.readouterr().err == ""
