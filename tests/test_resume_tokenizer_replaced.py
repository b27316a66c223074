"""A resume whose tokenizer.path now holds another tokenizer (retrained, or another model's copied over it) trained
the saved weights on with the new ids, without a word: the next step_<k> held the new tokenizer, its predecessors the
old one. It is refused now in one line naming tokenizer.path and the file, before the run's folder is touched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from run_folders import aged, stat_tree, tiny_cfg


def _swap_two_pieces(model_file: Path) -> None:
    """Another SentencePiece model of the same size: two ordinary pieces trade ids."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(model_file.read_bytes())
    a, b = [i for i, p in enumerate(proto.pieces)
            if p.type == pb.ModelProto.SentencePiece.NORMAL and len(p.piece) > 2][:2]
    proto.pieces[a].piece, proto.pieces[b].piece = proto.pieces[b].piece, proto.pieces[a].piece
    model_file.write_bytes(proto.SerializeToString())


def _recipe(run: Path, tok: Path, **over):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe(tiny_cfg(run, tok, **{"loss.alpha": 0.0, **over}))


def _run_reading(tiny_finished_run: Path, run: Path, tok: Path) -> None:
    """``tiny_finished_run`` copied to ``run`` as if it had read its tokenizer from ``tok`` (its recipe state's
    config says so; its step_1 holds the tokenizer files copied from there)."""
    import torch

    from torchtune_longshort.training.checkpointing import recipe_state_path

    shutil.copytree(tiny_finished_run, run, symlinks=True)
    state_file = recipe_state_path(run / "step_1")
    state = torch.load(state_file, weights_only=False)
    state["config"]["tokenizer"]["path"] = str(tok)
    torch.save(state, state_file)


def test_a_resume_whose_tokenizer_was_replaced_is_refused_before_any_write(tiny_finished_run, sp_tokenizer_dir,
                                                                           tmp_path):
    import sentencepiece as spm

    tok, run = tmp_path / "tok", tmp_path / "run"
    shutil.copytree(sp_tokenizer_dir, tok)
    _run_reading(tiny_finished_run, run, tok)
    unchanged = _recipe(run, tok, max_steps=1, resume=True)  # the same tokenizer: resumes (nothing left to train)
    unchanged.setup()
    assert unchanged.finished
    unchanged.cleanup()

    _swap_two_pieces(tok / "tokenizer.model")
    text = "def main(self):\n    return self.value + other_value\n" * 4
    old = spm.SentencePieceProcessor(model_file=str(run / "step_1" / "tokenizer.model")).encode(text)
    assert spm.SentencePieceProcessor(model_file=str(tok / "tokenizer.model")).encode(text) != old  # other ids
    before = aged(run)
    with pytest.raises(ValueError, match=(
            rf"^resume=True with tokenizer\.path='{tok}': its {tok}/tokenizer\.model is not the tokenizer the run "
            rf"trained with \({run}/step_1/tokenizer\.model, copied from it when step_1 was saved; .*Put the run's "
            rf"file back \(cp {run}/step_1/tokenizer\.model {tok}/tokenizer\.model\)")):
        _recipe(run, tok, max_steps=2, resume=True).setup()
    assert stat_tree(run) == before  # refused before the lock: nothing written, no mtime moved


def test_a_sentencepiece_file_of_another_name_is_compared_with_the_steps_tokenizer_model(tmp_path):
    from torchtune_longshort.training.tokenizer_unchanged import check_tokenizer_unchanged

    step = tmp_path / "run" / "step_2"
    step.mkdir(parents=True)
    (step / "tokenizer.model").write_bytes(b"the run's model")
    mine = tmp_path / "mine.model"
    mine.write_bytes(b"the run's model")
    check_tokenizer_unchanged(step, {"tokenizer": {"path": str(mine)}})  # the same bytes: no refusal
    mine.write_bytes(b"another model")
    with pytest.raises(ValueError, match=rf"^resume=True with tokenizer\.path='{mine}': its {mine} is not"):
        check_tokenizer_unchanged(step, {"tokenizer": {"path": str(mine)}})
    # no tokenizer.path: the start folder is the source
    with pytest.raises(ValueError, match=r"^resume=True with checkpointer\.checkpoint_dir="):
        check_tokenizer_unchanged(step, {"tokenizer": {"path": None}, "checkpointer": {"checkpoint_dir": str(mine)}})
