"""resume=True where recipe_state/step_<k>.pt is a folder (a mkdir after the state was deleted): the newest step's
state was skipped, the run resumed from an older one, trained, and failed its save of step_<k> ('[Errno 21] Is a
directory'), losing the older step folder on the way; it is refused at the start, in one line, nothing touched."""

from __future__ import annotations

import pytest


def test_a_recipe_state_that_is_a_folder_is_refused_before_the_resume(tmp_path, sp_tokenizer_dir):
    from run_folders import commit_step, stat_tree

    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune_longshort.models.hf_model import decoder_config, hf_decoder
    from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path
    from torchtune_longshort.training.output_dir import check_output_dir

    out = tmp_path / "run"
    node = dict(family="llama", vocab_size=512, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32,
                max_seq_len=128)
    write_hf_checkpoint(tmp_path / "ckpt", hf_decoder(**node).state_dict(), decoder_config(node),
                        tokenizer=sp_tokenizer_dir)
    out.mkdir()
    (out / ".longshort_output").write_text("")
    for k in (2, 4):  # as a run with keep_recipe_states=2 leaves them
        commit_step(out, k, tmp_path / "ckpt")
    assert StepCheckpoints(out).latest(resumable=True) == out / "step_4"
    state = recipe_state_path(out / "step_4")
    state.unlink()
    state.mkdir()
    assert StepCheckpoints(out).latest(resumable=True) == out / "step_2"  # what the resume went on from
    before = stat_tree(out)
    with pytest.raises(FileExistsError) as e:
        check_output_dir(out, resume=True, overwrite=False)
    assert str(e.value) == (f"resume=True: {state} is a folder, where the recipe keeps step_4's optimizer and data "
                            "state (a file): move it out of recipe_state/, then resume"), str(e.value)
    assert stat_tree(out) == before
    state.rmdir()  # as the line says: then the older step is the resume point, as keep_recipe_states=2 allows
    check_output_dir(out, resume=True, overwrite=False)
