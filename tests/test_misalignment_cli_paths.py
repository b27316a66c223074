"""longshort-misalignment's folder and file options take ``~`` as the home folder also after ``=``, where no shell
expands it (README: "in every other command's folder or file options ... also after `=`")."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest


def test_tilde_after_equals_is_the_home_folder(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, monkeypatch, capsys):
    # `--checkpoint-dir=~/ckpt` was refused as "--checkpoint-dir='~/ckpt' is not a directory", and `--data=~/d.txt`
    # as "no such file or folder"
    from torchtune_longshort.metrics.cli import main

    home = tmp_path / "home"
    shutil.copytree(tiny_llama2_dir, home / "ckpt")
    shutil.copy(sp_tokenizer_dir / "tokenizer.model", home / "tok.model")
    (home / "d.txt").write_text("def f(x):\n    return x + 1\n" * 200)
    monkeypatch.setenv("HOME", str(home))
    # the reference: what a shell makes of the same words written with a space (`--data ~/d.txt`)
    shell = subprocess.run(["bash", "-c", 'printf "%s\\n" ~/ckpt ~/tok.model ~/d.txt'], capture_output=True,
                           text=True, check=True, env={"HOME": str(home)}).stdout.split()
    main(["--checkpoint-dir=~/ckpt", "--tokenizer=~/tok.model", "--data=~/d.txt", "--length", "32", "--num-samples",
          "2", "--output=~/t.json"])
    got = json.loads((home / "t.json").read_text())
    assert got["checkpoint_dir"] == str(Path(shell[0]).resolve()) and got["data"] == str(Path(shell[2]).resolve())
    assert got["tokenizer"].endswith(shell[1]) and len(got["values"]["sce"]) == 2, got["tokenizer"]
    assert "error" not in capsys.readouterr().err


def test_a_checkpoint_dir_that_is_not_there_is_said_not_to_exist(tmp_path, capsys):
    """--checkpoint-dir /nonexistent was refused as "is not a directory", as if something were there; it now says
    "does not exist" (the reference: os.path.lexists), a file keeps "is a file", and a path that is there but neither
    (a named pipe) "is not a directory"."""
    import os

    import pytest

    from torchtune_longshort.metrics.cli import main

    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    expected = "expected a Hugging Face checkpoint folder (config.json + *.safetensors)"
    for name, said in [("nope", f"does not exist: {expected}"),
                       ("afile", f"is a file: {expected}; pass the folder that holds config.json"),
                       ("pipe", f"is not a directory: {expected}")]:
        assert os.path.lexists(tmp_path / name) == (name != "nope")
        with pytest.raises(SystemExit) as stop:
            main(["--checkpoint-dir", str(tmp_path / name), "--length", "64"])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err == (f"longshort-misalignment: error: --checkpoint-dir="
                                                f"{str(tmp_path / name)!r} {said}\n"), err


@pytest.mark.parametrize("flag", ["--checkpoint-dir", "--output", "--data", "--tokenizer"])
def test_an_empty_path_is_refused_naming_its_flag(flag, tmp_path, monkeypatch, capsys):
    """`--output ""` (an unset $OUT) scored every sample and wrote nothing, exit 0; `--checkpoint-dir ""` was told as
    '.' and `--data ""` as the files of the working directory. Now argparse's one line naming the flag, exit 2."""
    from torchtune_longshort.metrics.cli import main

    monkeypatch.chdir(tmp_path)
    argv = {"--checkpoint-dir": str(tmp_path), "--length": "64", flag: ""}
    with pytest.raises(SystemExit) as stop:
        main([x for kv in argv.items() for x in kv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err == (f"longshort-misalignment: error: argument {flag}: '' is an empty path: "
                                            "give a file or folder (an unset shell variable gives an empty one)\n")
    assert not any(tmp_path.iterdir())
