"""``made_folders.remove_made_folders(path, root)`` where ``path`` itself was never made (a command refused after it
made ``a/b`` on the way to ``a/b/c``): the folders it did make, ``a/b`` and ``a``, are taken back, and the parent
that held none of them stays. The reference: ``os.path.lexists`` on each, and ``os.listdir`` of the parent."""

from __future__ import annotations

import os

from torchtune_longshort.made_folders import missing_root, remove_made_folders


def test_the_made_parents_are_taken_back_where_the_leaf_was_never_made(tmp_path):
    leaf = tmp_path / "a" / "b" / "c"
    root = missing_root(leaf)
    assert root == tmp_path / "a"
    os.makedirs(tmp_path / "a" / "b")  # made on the way; c never was
    remove_made_folders(leaf, root)
    assert not os.path.lexists(tmp_path / "a" / "b") and not os.path.lexists(tmp_path / "a")
    assert os.listdir(tmp_path) == []


def test_a_made_parent_holding_a_file_stays(tmp_path):
    leaf = tmp_path / "a" / "b" / "c"
    root = missing_root(leaf)
    os.makedirs(tmp_path / "a" / "b")
    (tmp_path / "a" / "keep.txt").write_text("x")  # put there by someone else meanwhile
    remove_made_folders(leaf, root)
    assert not os.path.lexists(tmp_path / "a" / "b")
    assert sorted(os.listdir(tmp_path / "a")) == ["keep.txt"]


def test_a_path_that_exists_as_a_file_has_no_missing_root(tmp_path):
    """missing_root's rule ("None when ``path`` exists"), os.path.exists the reference: a file is not a folder to make."""
    f = tmp_path / "notes.txt"
    f.write_text("theirs\n")
    assert os.path.exists(f) and missing_root(f) is None
    assert missing_root(tmp_path / "new" / "x") == tmp_path / "new"


def test_a_users_empty_folders_stay_where_nothing_was_made_or_the_path_is_outside_what_was(tmp_path):
    """Nothing made (``root`` None), or a ``path`` that is not under the ``root`` made: each empty folder of the
    user's stays (hand mutants that dropped either check removed them, and every empty parent above)."""
    mine = tmp_path / "mine" / "empty"
    os.makedirs(mine)
    remove_made_folders(mine, None)
    os.makedirs(tmp_path / "made")
    remove_made_folders(mine, tmp_path / "made")
    assert mine.is_dir() and sorted(os.listdir(tmp_path)) == ["made", "mine"]
