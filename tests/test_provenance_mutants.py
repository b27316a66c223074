"""Hand mutants of provenance.py that survived test_provenance.py and test_results_io.py (mutants42): the dirty
flag against git's own ``git status --porcelain --untracked-files=no`` on a tiny repository (an untracked file is
not a change of the checkout, a changed tracked file is), a repository whose top is not the project's root, the
commit's 12 characters in the reports, the device left out of ``differs``, and the stdlib hash only when asked or
used."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from torchtune_longshort import provenance as prov
from torchtune_longshort.provenance import checkout_commit, differs, provenance_markdown


@pytest.fixture
def repo(tmp_path):
    """A tiny git repository that tracks a copy of this package's provenance.py at the checkout's place."""
    root = tmp_path.resolve()
    (root / "torchtune_longshort").mkdir()
    (root / "torchtune_longshort" / "provenance.py").write_bytes(Path(prov.__file__).read_bytes())
    _git(root, "init", "-q")
    _git(root, "add", "torchtune_longshort")
    _git(root, "commit", "-q", "-m", "the project")
    return root


def _git(root: Path, *args: str) -> str:
    cmd = ["git", "-C", str(root), "-c", "user.name=u", "-c", "user.email=u@localhost", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def test_the_dirty_flag_is_gits_status_of_tracked_files(repo):
    (repo / "notes.txt").write_text("untracked\n")
    assert _git(repo, "status", "--porcelain", "--untracked-files=no") == ""  # git: no change to the checkout
    assert checkout_commit(repo) == {"git_commit": _git(repo, "rev-parse", "HEAD"), "git_dirty": False}
    with open(repo / "torchtune_longshort" / "provenance.py", "a") as f:
        f.write("# edited\n")
    assert _git(repo, "status", "--porcelain", "--untracked-files=no") != ""  # git: a change
    assert checkout_commit(repo)["git_dirty"] is True


def test_a_folder_below_a_repositorys_top_is_no_checkout(repo):
    # the repository tracks sub/torchtune_longshort/provenance.py, but its top is not the folder asked about
    sub = repo / "sub"
    (sub / "torchtune_longshort").mkdir(parents=True)
    (sub / "torchtune_longshort" / "provenance.py").write_bytes(Path(prov.__file__).read_bytes())
    _git(repo, "add", "sub")
    _git(repo, "commit", "-q", "-m", "nested")
    assert Path(_git(sub, "rev-parse", "--show-toplevel")).resolve() == repo
    assert checkout_commit(sub) == {"git_commit": None, "git_dirty": None}


def _block(commit="0123456789abcdef0123", dirty=False):
    return {"project": {"version": "0.1", "git_commit": commit, "git_dirty": dirty},
            "packages": {"torch": "2.5.0", "lm_eval": None}, "python": {"version": "3.11.9", "implementation": "x"},
            "device": {"type": "cpu", "name": "c", "count": 2}}


def test_the_markdown_names_the_commits_first_12_characters_and_what_is_missing():
    commit = "0123456789abcdef0123"
    text = provenance_markdown(_block(commit, dirty=True))
    assert f"commit {commit[:12]} (with uncommitted changes)\n" in text
    assert "torch 2.5.0, lm_eval not installed" in text
    assert "commit no git checkout\n" in provenance_markdown(_block(None))


def test_differs_ignores_the_device_only():
    other_device = {**_block(), "device": {"type": "cuda", "name": "g", "count": 1}}
    assert not differs(_block(), other_device)
    assert differs(_block(), {**_block(), "python": {"version": "3.11.10", "implementation": "x"}})


def test_the_stdlib_hash_is_left_out_when_refused_even_if_the_corpus_was_used(monkeypatch):
    monkeypatch.setattr(prov.stdlib_corpus, "was_used", lambda: True)
    monkeypatch.setattr(prov.stdlib_corpus, "content_hash", lambda: {"sha256": "0" * 64})
    assert "stdlib_corpus" not in prov.provenance("cpu", stdlib=False)
    assert prov.provenance("cpu")["stdlib_corpus"] == {"sha256": "0" * 64}
