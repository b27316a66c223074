"""A user's file nested inside the earlier run an overwrite start that was killed set aside (``.replaced/step_4/sub/``,
``.replaced/logs/sub/``) was moved back into the run folder by the next start's mend before the overwrite's
refusal named it; one inside ``.replaced.discarded/`` (the earlier run being deleted when the start was killed) was
deleted without a word. Both are refused where they lie, before anything moves; what a deletion killed part-way
leaves of the recipe's own files is still finished."""

from __future__ import annotations

import pytest
from run_folders import recipe_made, tree
from test_killed_run_start import _killed_overwrite_start


@pytest.mark.parametrize("where", [".replaced/step_4/sub/notes.txt", ".replaced/logs/sub/deep/notes.txt",
                                   ".replaced.discarded/step_4/sub/notes.txt", ".replaced.discarded/mine/notes.txt"])
def test_a_users_file_nested_in_the_earlier_run_set_aside_is_refused_where_it_lies(tmp_path, tiny_llama2_dir, where):
    from torchtune_longshort.training.output_dir import claim_output_dir

    run = recipe_made(tmp_path / "run")
    _killed_overwrite_start(run, tiny_llama2_dir, listed=True)
    if where.startswith(".replaced.discarded/"):  # killed once its logger had started: the earlier run being deleted
        (run / ".replaced").rename(run / ".replaced.discarded")
    note = run / where
    note.parent.mkdir(parents=True)
    note.write_text("mine")
    left = [p for p in tree(run) if p != ".lock"]
    named = where.rsplit("/", 1)[0] if "/mine/" in where else where  # a user's folder there: named whole
    with pytest.raises(FileExistsError, match=rf"holds '{named}', which this recipe did not write, in the folder "
                                              rf"where an overwrite start .*: move it out of '.*/run/"
                                              rf"{where.split('/')[0]}', then start again"):
        claim_output_dir(run, resume=False, overwrite=True, written_here=("logs",))
    assert [p for p in tree(run) if p != ".lock"] == left and note.read_text() == "mine"


def test_what_a_killed_deletion_left_of_the_earlier_run_is_still_deleted(tmp_path, tiny_llama2_dir):
    """The deletion killed part-way: a step folder emptied (its list removed last), a recipe state whose step folder
    went first. The next overwrite finishes it, as before."""
    import shutil

    from torchtune_longshort.training.output_dir import claim_output_dir

    run = recipe_made(tmp_path / "run")
    _killed_overwrite_start(run, tiny_llama2_dir, listed=True)
    (run / ".replaced").rename(run / ".replaced.discarded")
    gone = run / ".replaced.discarded"
    for p in (gone / "step_4").iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    (gone / "step_2").mkdir()
    (gone / "recipe_state" / "step_2.pt").write_bytes(b"state")
    claim_output_dir(run, resume=False, overwrite=True, written_here=("logs",)).release()
    assert not gone.exists()
