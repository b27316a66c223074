"""longshort-misalignment's folder and file options take ``~`` as the home folder also after ``=``, where no shell
expands it (README: "in every other command's folder or file options ... also after `=`")."""

import json
import shutil
import subprocess
from pathlib import Path


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
