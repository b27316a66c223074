"""The BABILong generator sizes its rows with ``--tokenizer``'s tokens; a tokenizer folder whose config.json names a
family or RoPE method of one's own (a study's base, a step trained with one) was refused with a fix it does not
take ('... pass trust_remote_code=True in --model_args'), and no flag of the command trusted it, so a study on such
a base stopped at its babilong_data stage. ``--trust-remote-code`` now trusts it (the study passes it, as its
evaluations pass trust_remote_code=true); without it the refusal names that flag. The module's marker file is the
witness (tests/trust_gate.py)."""

from __future__ import annotations

import shutil

import pytest

from trust_gate import FAMILY_PATH, _folder_naming, _imported

from torchtune_longshort.eval.tasks.babilong.generator import main


def _their_tokenizer(tiny_llama2_dir, sp_tokenizer_dir, dst):
    folder = _folder_naming(tiny_llama2_dir, dst, longshort_family=FAMILY_PATH)
    for f in sp_tokenizer_dir.iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    return folder


def test_the_generator_trusts_a_tokenizer_folder_s_code_by_its_own_flag(marker, tiny_llama2_dir, sp_tokenizer_dir,
                                                                         tmp_path, capsys):
    folder = _their_tokenizer(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "theirs")
    (tmp_path / "hay.txt").write_text("The grass is green. The sky is blue. Here we go again.\n" * 400)
    argv = ["--tokenizer", str(folder), "--lengths", "1k", "--n", "1", "--qa", "qa1", "--haystack",
            str(tmp_path / "hay.txt")]
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "refused"), *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and not _imported(marker) and not (tmp_path / "refused").exists()
    assert err.strip().endswith(f"if you trust this checkpoint and {FAMILY_PATH.split('.')[0]}, pass "
                                "--trust-remote-code"), err
    assert main(["--out", str(tmp_path / "out"), *argv, "--trust-remote-code"]) == 0
    assert marker.read_text() == "imported" and (tmp_path / "out" / "1k" / "qa1.jsonl").is_file()
