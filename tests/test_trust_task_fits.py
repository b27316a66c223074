"""Stock ``lm-eval run --model hf --model_args pretrained=THEIR_FOLDER,tokenizer=MINE --include_path <pack> --tasks
longshort_ppl`` at a length past the folder's positions: the task's refusal of that length (check_fits_model) named
the RoPE method the folder's config.json carries, reading it as the ``longshort`` model does, and so imported a
method of one's own it named (``longshort_rope.method='gate_pkg.mine.MyLinear'``), running its top-level code with no
trust asked (stock lm-eval sets no reader's gate; the README's table says the pack's tasks refuse such a path). It is
read now under the task's own answer (``trust_remote_code`` in its metadata, where lm-eval puts ``--model_args``):
untrusted, nothing is imported and the refusal says how to trust it; trusted, as before. The module's marker file is
the witness (tests/trust_gate.py)."""

from __future__ import annotations

import pytest

from trust_gate import PKG, ROPE_PATH, _imported, _linear_scaled

from torchtune_longshort.eval.tasks.common.unavailable import MODEL_KEY, TaskDataError, check_fits_model


def _refusal(metadata) -> str:
    with pytest.raises(TaskDataError) as e:
        check_fits_model(512, metadata)  # the folder covers 256 positions (max_position_embeddings)
    return str(e.value)


def test_a_task_past_the_model_does_not_import_the_rope_method_a_folder_names_untrusted(marker, tiny_llama2_dir,
                                                                                         tmp_path):
    folder = _linear_scaled(tiny_llama2_dir, tmp_path / "theirs", ROPE_PATH)
    said = _refusal({"pretrained": str(folder), MODEL_KEY: "hf"})
    assert not _imported(marker)
    assert said.endswith(
        f"or longshort-eval --model longshort with trust_remote_code=True in --model_args, if you trust the RoPE "
        f"method {ROPE_PATH!r} its config.json names (code outside torchtune_longshort, in {PKG}: not imported)")
    said = _refusal({"pretrained": str(folder), MODEL_KEY: "hf", "trust_remote_code": False})
    assert not _imported(marker) and "not imported" in said


def test_a_trusted_task_reads_the_folder_s_own_scaling(marker, tiny_llama2_dir, tmp_path):
    folder = _linear_scaled(tiny_llama2_dir, tmp_path / "theirs", ROPE_PATH)
    said = _refusal({"pretrained": str(folder), MODEL_KEY: "hf", "trust_remote_code": True})
    assert marker.read_text() == "imported"
    assert said.endswith(f"or longshort-eval --model longshort (it runs the folder's own {ROPE_PATH} scaling)")


def test_a_shipped_method_needs_no_trust(tiny_llama2_dir, tmp_path):
    folder = _linear_scaled(tiny_llama2_dir, tmp_path / "ours", "linear")
    said = _refusal({"pretrained": str(folder), MODEL_KEY: "hf"})
    assert said.endswith("or longshort-eval --model longshort (it runs the folder's own linear scaling)")
