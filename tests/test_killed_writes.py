"""A command killed part-way while it writes into a folder the user named (SIGKILL: no Python left to clean up).

Before: the eval report's and the study report's files were listed only in their ``summary.json``, written last, so
a report killed before it left figures no record listed, and the rerun refused them by name ("holds
'ppl_vs_length.png', which no earlier run there wrote"). And a rerun that drew fewer figures left the earlier ones
beside the new report, unlisted, so the run after it was refused. Now ``output_guard.undone_on_failure`` records each
name in ``.longshort_writing`` before the file appears; a rerun takes those as its own and removes what it does not
write again, and never a file of the user's."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from killed import killed_after_first_figure

from torchtune_longshort.eval.report import main as report_main
from torchtune_longshort.output_guard import (
    WRITING, atomic_write_text, check_output_folder, undone_on_failure,
)
from torchtune_longshort.temporary_files import temporary_of

PATTERNS = ("out_*.txt", "runs")

# a child that writes three files through undone_on_failure and is killed by SIGKILL after the file numbered KILL
WRITER = """
import os, signal, sys
from pathlib import Path
from torchtune_longshort.output_guard import atomic_write_text, undone_on_failure
folder, kill, names = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
with undone_on_failure(folder, {patterns!r}):
    for i, name in enumerate(names):
        atomic_write_text(folder / name, name)
        if i + 1 == kill:
            os.kill(os.getpid(), signal.SIGKILL)
"""


def _write_killed(folder: Path, kill: int, names) -> None:
    p = subprocess.run([sys.executable, "-c", WRITER.format(patterns=PATTERNS), str(folder), str(kill), *names])
    assert p.returncode == -signal.SIGKILL


def _check(folder: Path) -> None:
    check_output_folder(folder, "--out", PATTERNS, lambda f: False)  # no earlier finished run: only the record


def test_a_killed_run_is_recorded_and_its_rerun_takes_its_files_and_removes_the_stale_ones(tmp_path):
    folder = tmp_path / "rep"
    _write_killed(folder, 2, ["out_a.txt", "runs/k1/r.json", "out_b.txt"])
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == [
        WRITING, "out_a.txt", "runs", "runs/k1", "runs/k1/r.json"]
    assert set(json.loads((folder / WRITING).read_text())) >= {"out_a.txt", "runs", "runs/k1", "runs/k1/r.json"}
    _check(folder)  # not refused: the record lists every name
    (folder / "mine.txt").write_text("the user's")
    with undone_on_failure(folder, PATTERNS):  # the rerun writes out_b.txt only
        atomic_write_text(folder / "out_b.txt", "b")
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == ["mine.txt", "out_b.txt"]


def test_a_second_kill_keeps_the_first_ones_names_and_a_users_file_is_still_refused(tmp_path):
    folder = tmp_path / "rep"
    _write_killed(folder, 1, ["out_a.txt", "out_b.txt"])
    _write_killed(folder, 1, ["out_c.txt"])
    _check(folder)
    (folder / "out_user.txt").write_text("the user's")
    with pytest.raises(FileExistsError, match="'out_user.txt', which no earlier run there wrote"):
        _check(folder)
    (folder / "out_user.txt").unlink()
    with pytest.raises(OSError):  # a rerun that fails keeps the record of what the killed ones left
        with undone_on_failure(folder, PATTERNS):
            atomic_write_text(folder / "out_d.txt", "d")
            raise OSError(28, "No space left on device")
    assert sorted(p.name for p in folder.iterdir()) == [WRITING, "out_a.txt", "out_c.txt"]
    _check(folder)


def test_a_run_that_only_finishes_leaves_no_record(tmp_path):
    folder = tmp_path / "rep"
    with undone_on_failure(folder, PATTERNS):
        atomic_write_text(folder / "out_a.txt", "a")
        atomic_write_text(tmp_path / "elsewhere.txt", "not in the folder: not recorded")
        listed = json.loads((folder / WRITING).read_text())  # the temporary file's name too, once made
        assert listed[1:] == ["out_a.txt"] and temporary_of(listed[0]) == "out_a.txt", listed
    assert sorted(p.name for p in folder.iterdir()) == ["out_a.txt"]


def test_a_run_that_fails_leaves_no_folder_it_made_nor_its_parents(tmp_path):
    # `longshort-eval-report ... --out new/deep/rep` on a full disk: rep went, new/deep stayed (empty)
    with pytest.raises(OSError):
        with undone_on_failure(tmp_path / "new" / "deep" / "rep", PATTERNS):
            atomic_write_text(tmp_path / "new" / "deep" / "rep" / "out_a.txt", "a")
            raise OSError(28, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_a_link_to_nothing_of_a_name_the_command_writes_is_refused(tmp_path):
    # `longshort-eval-report R --out GL` with GL/report.md a symbolic link to nothing: a name without wildcards does
    # not glob a link to nothing, so the report replaced the user's link with its file
    (tmp_path / "runs").symlink_to(tmp_path / "gone")
    with pytest.raises(FileExistsError, match="holds 'runs', which no earlier run there wrote"):
        _check(tmp_path)
    assert (tmp_path / "runs").is_symlink()


def _results(d: Path, results) -> Path:
    d.mkdir(parents=True)
    (d / "results_2026-01-01T00-00-00.json").write_text(json.dumps({"results": results}))
    return d


def test_the_eval_report_killed_part_way_and_one_that_draws_fewer_figures(tmp_path, capsys):
    passkey = _results(tmp_path / "a", {"longshort_ppl": {"ppl_512,none": 9.25},
                                         "longshort_passkey": {"acc,none": 0.5, "acc_2k_d0,none": 1.0}})
    ppl_only = _results(tmp_path / "b", {"longshort_ppl": {"ppl_512,none": 8.5}})
    out = tmp_path / "rep"
    killed_after_first_figure("torchtune_longshort.eval.report.build",
                              "target.build_report([sys.argv[1]], sys.argv[2])", passkey, out)
    assert (out / "ppl_vs_length.png").is_file()
    assert not (out / "summary.json").exists()
    report_main([str(passkey), "--out", str(out)])  # was refused: 'ppl_vs_length.png', which no earlier run wrote
    assert (out / "heatmap_longshort_passkey_a.png").is_file() and not (out / WRITING).exists()
    report_main([str(ppl_only), "--out", str(out)])  # no passkey: the earlier heatmap is not left beside it
    assert sorted(p.name for p in out.iterdir()) == ["ppl_vs_length.png", "report.md", "summary.json"]
    report_main([str(passkey), "--out", str(out)])  # was refused for that heatmap
    assert "heatmap_longshort_passkey_a.png" in json.loads((out / "summary.json").read_text())["files"]
    capsys.readouterr()


def test_temporary_folders_a_killed_process_left_are_removed_by_the_next_one(tmp_path, capsys):
    """A SIGKILL while a tokenizer trained or the GGUF converted left its hidden ``.<name>.<tag>_*`` folder for good
    (540 MB in the cache for the converted SmolLM2); the next call beside the same target removes those untouched for
    a day, and nothing else: a fresh one (another process at work), another tag, a user's folder."""
    import os
    import time

    from torchtune_longshort.made_folders import folder_beside
    from torchtune_longshort.temporary_files import ABANDONED_AFTER_S

    target = tmp_path / "model"
    names = [".model.converting_old", ".model.converting_fresh", ".model.training_old", "model.converting_old"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "part.safetensors").write_text("x")
    past = time.time() - ABANDONED_AFTER_S - 60
    os.symlink(tmp_path / "model.converting_old", tmp_path / ".model.converting_link")  # to a user's folder
    (tmp_path / ".model.converting_file").write_text("a user's file")  # not a folder
    for name in [*names, ".model.converting_file"]:
        if name.endswith(("_old", "_file")):
            os.utime(tmp_path / name, (past, past))
    mine = folder_beside(target, "converting")
    assert mine.name.startswith(".model.converting_") and mine.is_dir()
    left = sorted(p.name for p in tmp_path.iterdir() if p != mine)
    assert left == [".model.converting_file", ".model.converting_fresh", ".model.converting_link",
                    ".model.training_old", "model.converting_old"]
    assert capsys.readouterr().err.count("removed 1 temporary folder a killed process left") == 1


@pytest.mark.parametrize("option, fix", [("--out", "choose another --out,"),
                                         ("the model folder in LONGSHORT_CACHE", "choose another folder,")])
def test_a_refusal_names_what_to_choose_in_words_that_read(tmp_path, option, fix):
    # the model cache's refusal read "choose another the model folder in LONGSHORT_CACHE"
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileExistsError) as err:
        check_output_folder(tmp_path, option, ["*"], lambda folder: False)
    assert str(err.value).endswith(f"refusing to overwrite; {fix} or move those away")
    assert (tmp_path / "config.json").read_text() == "{}"
