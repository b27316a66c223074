"""A GGUF conversion's ``--out`` inside another model's folder (``--gguf X.gguf --out model/sub``, ``--model NAME
--out model``, which converts into ``model/NAME``): refused before anything is written (the converted model was
written among the other model's files, exit 0). A folder an earlier conversion wrote is still replaced (the
conversion tests). The reference: the folders' listing before and after."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_gguf_lock import _fake_conversion, _tiny_gguf

from torchtune_longshort.models.gguf import main


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("argv, out", [(["--gguf", "X.gguf", "--out", "model/sub"], "model/sub"),
                                       (["--gguf", "X.gguf", "--out", "model/a/b"], "model/a/b"),
                                       (["--model", "smollm2-135m-instruct", "--out", "model"],
                                        "model/smollm2-135m-instruct")])
def test_a_conversion_into_another_models_folder_is_refused_before_anything_is_written(
        tmp_path, tiny_llama2_dir, sp_tokenizer_dir, monkeypatch, capsys, argv, out):
    _fake_conversion(monkeypatch, sp_tokenizer_dir)  # the parent then wrote a real folder there
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.chdir(tmp_path)
    _tiny_gguf(tmp_path / "X.gguf")
    shutil.copytree(tiny_llama2_dir, tmp_path / "model")
    before = _listing(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert f"--out={out!r} lies inside the model folder {str((tmp_path / 'model').resolve())!r}" in err[0], err
    assert "name a folder outside it" in err[0]
    assert _listing(tmp_path) == before
