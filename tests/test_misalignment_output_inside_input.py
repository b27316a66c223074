"""longshort-misalignment's ``--output`` inside what it reads (``--checkpoint-dir model --output model/m.json``, a
local ``--data`` folder, ``--tokenizer``'s folder) or inside another model's folder: refused before anything is read
(the result was written among their files, exit 0). The reference: the folders' listing before and after."""

from __future__ import annotations

import shutil
from argparse import Namespace
from pathlib import Path

import pytest


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("output, tokenizer, said", [
    ("ckpt/m.json", "tok/tokenizer.model", "--output='ckpt/m.json' lies inside --checkpoint-dir='ckpt'"),
    ("data/m.json", "tok/tokenizer.model", "--output='data/m.json' lies inside --data='data'"),
    ("tok/m.json", "tok/tokenizer.model", "--output='tok/m.json' lies inside --tokenizer='tok'"),
    ("other/sub/m.json", "tok/tokenizer.model", "--output='other/sub/m.json' lies inside the model folder "),
])
def test_a_result_among_the_inputs_files_is_refused_before_anything_is_read(
        tiny_llama2_dir, sp_tokenizer_dir, tmp_path, monkeypatch, capsys, output, tokenizer, said):
    from torchtune_longshort.metrics.cli import _check_output, main

    monkeypatch.chdir(tmp_path)
    for name in ("ckpt", "other"):
        shutil.copytree(tiny_llama2_dir, tmp_path / name)
    (tmp_path / "other" / "sub").mkdir()
    shutil.copytree(sp_tokenizer_dir, tmp_path / "tok")
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")  # a tokenizer's folder: its file stands for it
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.txt").write_text("def f(x):\n    return x + 1\n" * 200)
    before = _listing(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["--checkpoint-dir", "ckpt", "--tokenizer", tokenizer, "--data", "data", "--length", "32",
              "--num-samples", "2", "--output", output])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and said in err[0], err
    assert err[0].endswith("which this command reads: the result would be written among its files; name a folder "
                           "outside it") or "which holds a model" in err[0], err
    assert _listing(tmp_path) == before
    # beside a data file, or beside the inputs: taken
    _check_output(Namespace(checkpoint_dir="ckpt", tokenizer=tokenizer, data="data/d.txt", output="data/m.json"))
    _check_output(Namespace(checkpoint_dir="ckpt", tokenizer=tokenizer, data="data", output="m.json"))
