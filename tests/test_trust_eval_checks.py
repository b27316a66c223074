"""longshort-eval's own checks before lm-eval starts read the checkpoint folders of the command too, outside the
``longshort`` model's gate (tests/test_trust_remote_code.py): the passkey task's haystack check built the model's
tokenizer from the folder (its family named the tokenizer formats' order), importing the module its config.json
named, after which the model's gate found that path imported already and let the run go on, never asking; ``--model
hf ... peft=<step>/adapter`` compared the step's RoPE with the base's, importing the method the step names. Both are
read under the command's trust now (the module's marker file the witness)."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from trust_gate import FAMILY_PATH, ROPE_PATH, _folder_naming, _imported



def _eval(argv, monkeypatch, capsys):
    from torchtune_longshort.eval.__main__ import main

    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run", *argv])
    with pytest.raises(SystemExit) as e:
        main()
    return e.value.code, capsys.readouterr().err


def test_the_passkey_check_does_not_import_a_family_the_folder_names_untrusted(
        marker, tiny_llama2_dir, sp_tokenizer_dir, tmp_path, monkeypatch, capsys):
    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    for f in sp_tokenizer_dir.iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    (tmp_path / "hay.txt").write_text("The grass is green. The sky is blue. Here we go again.\n" * 400)
    metadata = {"max_seq_lengths": [256], "passkey_haystack": "local",
                "passkey_haystack_files": str(tmp_path / "hay.txt")}
    code, err = _eval(["--model", "longshort", "--model_args", f"pretrained={folder}", "--tasks", "longshort_passkey",
                       "--metadata", json.dumps(metadata), "--device", "cpu", "--output_path", str(tmp_path / "ev")],
                      monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"longshort-eval: error: {folder}/config.json: longshort_family='{FAMILY_PATH}' names code "
                          "outside torchtune_longshort") and "pass trust_remote_code=True in --model_args" in err
    assert not _imported(marker) and not (tmp_path / "ev").exists()


def test_the_hf_peft_check_does_not_import_a_rope_method_the_step_names_untrusted(
        marker, tiny_llama2_dir, tmp_path, monkeypatch, capsys):
    marked = f"longshort-{ROPE_PATH} (not representable in transformers: evaluate with longshort-eval --model " \
             "longshort)"
    step = _folder_naming(tiny_llama2_dir, tmp_path / "step_2", rope_scaling={"rope_type": marked},
                          rope_parameters={"rope_type": marked, "rope_theta": 10000.0}, longshort_rope={
                              "method": ROPE_PATH, "factor": 2.0, "base": 10000.0, "max_seq_len": 512, "head_dim": 16,
                              "original_max_seq_len": 256})
    (step / "adapter").mkdir()
    (step / "adapter" / "longshort_adapter.json").write_text("{}")
    argv = ["--model", "hf", "--model_args", f"pretrained={tiny_llama2_dir},peft={step / 'adapter'}", "--tasks",
            "longshort_ppl", "--device", "cpu", "--output_path", str(tmp_path / "ev")]
    code, err = _eval(argv, monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"longshort-eval: error: {step}/config.json: longshort_rope.method='{ROPE_PATH}' names code "
                          "outside torchtune_longshort") and "lm-eval's --trust_remote_code" in err
    assert not _imported(marker)
    code, err = _eval([*argv, "--trust_remote_code"], monkeypatch, capsys)  # trusted: the check reads it, as before
    assert code == 2 and "the run trained these adapters with RoPE method=" in err and marker.exists()
