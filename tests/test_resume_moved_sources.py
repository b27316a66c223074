"""A study (or model) folder moved and a run in it resumed: its saved config names the start checkpoint and the
tokenizer where they were (checkpointer.checkpoint_dir '/a/start' -> '/b/start', tokenizer.path '/a/tok' -> '/b/tok'),
both compared exactly, so the resume was refused with 'Resume with the saved values', which a user whose folders moved
cannot give. It now goes on where the new folders hold what the run read (the start's content digest the one its
recipe state saved, a full fine-tune's too; the tokenizer files the step's copies), each move logged as applied, and
refuses a start or tokenizer of other content naming the check. The reference: byte-for-byte copies (shutil)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def _run_started_from(tiny_finished_run: Path, run: Path, start: Path, tok: Path) -> dict:
    """``tiny_finished_run`` copied to ``run`` as if it had started (a full fine-tune) from the checkpoint folder
    ``start`` with the tokenizer folder ``tok``, its start digest recorded as the recipe's setup records it; its
    saved config."""
    import torch

    from torchtune_longshort.training.checkpointing import recipe_state_path
    from torchtune_longshort.training.model_setup import LoRAInfo
    from torchtune_longshort.training.recipe_checkpoints import check_start_unchanged

    shutil.copytree(tiny_finished_run, run, symlinks=True)
    shutil.copytree(run / "step_1", start)
    tok.mkdir()
    shutil.copy2(run / "step_1" / "tokenizer.model", tok / "tokenizer.model")
    state_file = recipe_state_path(run / "step_1")
    state = torch.load(state_file, weights_only=False)
    state["config"]["checkpointer"]["checkpoint_dir"] = state["config"]["checkpoint_dir"] = str(start)
    state["config"]["tokenizer"]["path"] = str(tok)
    state["start_digest"] = check_start_unchanged(None, start, start, LoRAInfo())  # None for full FT before
    torch.save(state, state_file)
    return state["config"]


def _with(saved: dict, start: Path, tok: Path) -> dict:
    return {**saved, "checkpoint_dir": str(start),
            "checkpointer": {**saved["checkpointer"], "checkpoint_dir": str(start)},
            "tokenizer": {**saved["tokenizer"], "path": str(tok)}}


def test_a_moved_start_and_tokenizer_resume_and_other_content_is_refused_naming_the_check(tiny_finished_run,
                                                                                         tmp_path, capsys):
    from torchtune_longshort.training.resume import resume_changes

    a, b, run = tmp_path / "a", tmp_path / "b", tmp_path / "run"
    saved = _run_started_from(tiny_finished_run, run, a / "start", a / "tok")
    shutil.move(a, b)  # the folder holding the start and the tokenizer moved away
    changes = resume_changes(run, _with(saved, b / "start", b / "tok"))
    assert ("checkpointer.checkpoint_dir", str(a / "start"), str(b / "start")) in changes
    assert ("checkpoint_dir", str(a / "start"), str(b / "start")) in changes  # the shipped configs' interpolation
    assert ("tokenizer.path", str(a / "tok"), str(b / "tok")) in changes
    # one move, one line naming the folder and the keys it touched (it was one 'changed (applied)' line per key)
    import torch

    from torchtune_longshort.training.resume import apply_resume_changes

    lines = []
    apply_resume_changes(changes, torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), None, lines.append)
    assert lines == [f"resume: {str(a)!r} moved to {str(b)!r}: checkpoint_dir, checkpointer.checkpoint_dir, "
                     "tokenizer.path (applied)"], lines
    # longshort-validate names the same move in one note (it listed one 'key: old -> new' per key)
    from omegaconf import OmegaConf

    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    given = _with(saved, b / "start", b / "tok")
    given.update(output_dir=str(run), resume=True, checkpointer={**given["checkpointer"], "output_dir": str(run)},
                  metric_logger={**given["metric_logger"], "log_dir": str(run / "logs")})  # the run, copied
    OmegaConf.save(given, tmp_path / "r.yaml")
    assert validate_main([str(tmp_path / "r.yaml")]) == 0
    notes = [ln.partition(": note: ")[2] for ln in capsys.readouterr().out.splitlines() if "resume=True" in ln]
    assert notes == [f"resume=True applies {str(a)!r} moved to {str(b)!r}: checkpoint_dir, "
                     "checkpointer.checkpoint_dir, tokenizer.path (as tune run will, and logs)"], notes

    config = (b / "start" / "config.json").read_text()
    (b / "start" / "config.json").write_text(config.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-06'))
    assert (b / "start" / "config.json").read_text() != config  # another start of the same shapes
    with pytest.raises(ValueError, match=(  # checkpoint_dir, the same move, not told to give its saved value
            rf"checkpoint_dir: '{a}/start' -> '{b}/start' \(the same move as checkpointer\.checkpoint_dir\); "
            rf"checkpointer\.checkpoint_dir: '{a}/start' -> '{b}/start' \(its config\.json or weights are not those "
            rf"of the start checkpoint whose digest the run's recipe state saved; to resume, put the run's start "
            rf"checkpoint back at '{a}/start'\)\. Otherwise, start a new run")):
        resume_changes(run, _with(saved, b / "start", b / "tok"))
    (b / "start" / "config.json").write_text(config)

    model = bytearray((b / "tok" / "tokenizer.model").read_bytes())
    model[len(model) // 2] ^= 1  # another tokenizer's bytes
    (b / "tok" / "tokenizer.model").write_bytes(bytes(model))
    with pytest.raises(ValueError, match=(
            rf"tokenizer\.path: '{a}/tok' -> '{b}/tok' \(its tokenizer files are not the copies in step_1, which the "
            rf"run trained with; to resume, put the run's tokenizer back at '{a}/tok'\)")):
        resume_changes(run, _with(saved, b / "start", b / "tok"))


def test_each_folder_moved_is_one_line_and_the_other_changes_pass_on():
    """Two folders moved (the start's and the tokenizer's, apart): one line each, its keys sorted, and a change that
    is no move (max_steps) left for the per-key line. The reference: the folders written out by hand."""
    from torchtune_longshort.training.moved_sources import Moved, moved_folders

    plain = ("max_steps", 2, 4)
    moves, rest = moved_folders([Moved("tokenizer.path", "/a/tok", "/c/tok"), plain,
                                 Moved("checkpointer.checkpoint_dir", "/x/a/start", "/y/start"),
                                 Moved("checkpoint_dir", "/x/a/start", "/y/start")])
    assert moves == ["'/a' moved to '/c': tokenizer.path",
                     "'/x/a' moved to '/y': checkpoint_dir, checkpointer.checkpoint_dir"], moves
    assert rest == [plain]
