"""A resume refused by what its run's metrics.jsonl holds leaves the run byte- and mtime-identical: the file was read
only when the metric logger had started, so a refusal there (a line that is not JSON, a folder named metrics.jsonl)
had already rewritten torchtune_config.yaml (resume: true, the new max_steps), made an empty logs/log_<t>.txt and
listed it in logs/.longshort_files. The lines a resume keeps are now read and checked before any write."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from run_folders import aged, stat_tree, tiny_cfg


def _contents(folder: Path):
    return {str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _bad_line(run: Path) -> None:
    path = run / "metrics.jsonl"
    path.write_text("garbage " + path.read_text())


def _a_folder(run: Path) -> None:
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()


@pytest.mark.parametrize("spoil, refusal", [
    (_bad_line, r"metrics\.jsonl:1: not a JSON line \('garbage \{"),
    # it said '[Errno 21] Is a directory: <run>/metrics.jsonl', no fix
    (_a_folder, r"^resume=True: \S+/run/metrics\.jsonl is a folder, where the recipe writes the run's metrics \(a file, "
                r"one JSON line a logged step\): move it out of \S+/run, then resume \(a fresh metrics\.jsonl is "
                r"started\)$"),
])
def test_a_refused_resume_leaves_every_file_as_it_was(tiny_finished_run, sp_tokenizer_dir, tmp_path, spoil,
                                                      refusal):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run = tmp_path / "run"
    shutil.copytree(tiny_finished_run, run, symlinks=True)
    spoil(run)
    before, contents = aged(run), _contents(run)
    recipe = LongShortFinetuneRecipe(tiny_cfg(run, sp_tokenizer_dir, max_steps=3, resume=True, **{"loss.alpha": 0.0}))
    with pytest.raises(Exception, match=refusal):
        recipe.setup()
    assert stat_tree(run) == before  # no log file made, no mtime moved (the folder's, the lock file's, put back)
    assert _contents(run) == contents  # torchtune_config.yaml, logs/.longshort_files: the same bytes


@pytest.mark.parametrize("spelled", ["interpolated", "through_a_linked_parent"])
def test_a_resume_refuses_a_logs_link_and_writes_nothing_through_it(tiny_finished_run, sp_tokenizer_dir, tmp_path,
                                                                     spelled):
    """``<run>/logs`` a symbolic link to a folder of the user's: ``overwrite_output_dir=True`` refused it ("it holds
    'logs', which this recipe did not write"), but ``resume=True`` wrote a new ``log_<time>.txt`` through it into the
    user's folder. Now the resume is refused naming the link, before any write: the run and the user's folder are as
    they were, the link still a link. So is a ``metric_logger.log_dir`` spelled out through a link to a folder above
    the run (``/tmp/run/logs`` on macOS, where ``/tmp`` is a link): it was compared with the resolved run folder and
    let through (the reference: ``os.path.realpath`` of its parent is the run)."""
    import os

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    over = {}
    if spelled == "through_a_linked_parent":
        (tmp_path / "via").symlink_to(tmp_path, target_is_directory=True)
        over = {"metric_logger.log_dir": str(tmp_path / "via" / "run" / "logs")}
        assert os.path.realpath(tmp_path / "via" / "run") == os.path.realpath(tmp_path / "run")
    run, mine = tmp_path / "run", tmp_path / "mine"
    shutil.copytree(tiny_finished_run, run, symlinks=True)
    shutil.rmtree(run / "logs")
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (run / "logs").symlink_to(mine)
    before, listed = aged(run), sorted(os.listdir(mine))
    with pytest.raises(FileExistsError, match=r"^resume=True: \S+/run/logs is a symbolic link, where the recipe writes "
                                              r"metric_logger\.log_dir='\S+/run/logs' \(a folder of the run's\): move "
                                              r"it out of \S+/run, then resume \(a fresh logs/ is started\)$"):
        LongShortFinetuneRecipe(tiny_cfg(run, sp_tokenizer_dir, max_steps=3, resume=True,
                                         **{"loss.alpha": 0.0, **over})).setup()
    assert stat_tree(run) == before and os.path.islink(run / "logs") and sorted(os.listdir(mine)) == listed
