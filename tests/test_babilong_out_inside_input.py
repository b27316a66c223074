"""The BABILong generator's ``--out`` in a model's folder (``--out <converted model>``, ``--out model/bab``), in its
``--tokenizer``'s folder or local ``--haystack``, or writing a ``<length>/`` folder that is one: refused before anything
is written (it wrote ``0k/`` and its list into the model's folder, and a conversion into that folder then refused
it). The reference: the folders' listing before and after."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from torchtune_longshort.eval.tasks.babilong import generator


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _model(tmp_path: Path, tiny_llama2_dir: Path) -> Path:
    model = tmp_path / "model"
    shutil.copytree(tiny_llama2_dir, model)
    return model


def _generate(capsys, *args):
    with pytest.raises(SystemExit) as e:
        generator.main([*args, "--lengths", "0k", "--n", "1", "--qa", "qa1"])
    err = capsys.readouterr().err.strip().splitlines()
    return e.value.code, err


@pytest.mark.parametrize("out, where", [("model", "is"), ("model/bab", "lies inside")])
def test_the_babilong_generator_refuses_an_out_in_a_model_folder(tmp_path, tiny_llama2_dir, capsys, monkeypatch, out,
                                                                  where):
    model = _model(tmp_path, tiny_llama2_dir)
    monkeypatch.chdir(tmp_path)
    before = _listing(tmp_path)
    code, err = _generate(capsys, "--out", out)
    assert code == 2 and len(err) == 1, err
    assert f"--out={out!r} {where} the model folder {str(model.resolve())!r}" in err[0]
    assert _listing(tmp_path) == before  # nothing written, in the model's folder or beside it


def test_the_babilong_generator_refuses_its_tokenizers_folder_and_a_length_folder_that_is_an_input(
        tmp_path, sp_tokenizer_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(sp_tokenizer_dir, tmp_path / "tok")
    (tmp_path / "data" / "0k").mkdir(parents=True)
    (tmp_path / "data" / "0k" / "a.txt").write_text("a haystack line\n" * 50)
    before = _listing(tmp_path)
    code, err = _generate(capsys, "--out", "tok", "--tokenizer", "tok/tokenizer.model")
    assert code == 2 and len(err) == 1 and "--out='tok' is --tokenizer='tok'" in err[0], err
    code, err = _generate(capsys, "--out", "data", "--haystack", "data/0k")
    assert code == 2 and len(err) == 1, err
    assert "--out='data' writes the rows in 'data/0k'; that folder is --haystack='data/0k'" in err[0]
    assert _listing(tmp_path) == before
    generator.check_apart(Path("rows"), ["0k", "1k"], "tok/tokenizer.model", "data/0k")  # beside them: passes
    generator.check_apart(Path("."), ["1k"], "tok/tokenizer.model", "data/0k")  # holding them, writing apart: too


@pytest.mark.parametrize("out, haystack, said", [
    ("hay", "hay/*.txt", "--out='hay' is the folder of --haystack's matches 'hay'"),
    ("data", "data/0k/*.txt", "--out='data' writes the rows in 'data/0k'; that folder is the folder of --haystack's "
                              "matches 'data/0k'"),
])
def test_a_glob_haystacks_folders_are_inputs_as_a_folder_haystack_is(tmp_path, capsys, monkeypatch, out, haystack,
                                                                     said):
    """``--haystack 'hay/*.txt' --out hay`` wrote ``0k/`` and the generator's list among the haystack's files, exit 0,
    where ``--haystack hay --out hay`` is refused. The reference: the folders ``glob`` matches files in, and the
    listing before and after."""
    import glob

    monkeypatch.chdir(tmp_path)
    for folder in ("hay", "data/0k"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "a.txt").write_text("a haystack line\n" * 50)
    assert {str(Path(f).parent) for f in glob.glob(haystack, recursive=True)} == {said.rsplit(" ", 1)[1].strip("'")}
    before = _listing(tmp_path)
    code, err = _generate(capsys, "--out", out, "--haystack", haystack)
    assert code == 2 and len(err) == 1 and said in err[0], err
    assert _listing(tmp_path) == before
    generator.check_apart(Path("rows"), ["0k"], None, "hay/*.txt")  # beside them: passes
    # below them, where a glob without ** reads nothing: cd books; --haystack '*.txt' --out rows, a plain call,
    # passes
    generator.check_apart(Path("hay/rows"), ["0k"], None, "hay/*.txt")


@pytest.mark.parametrize("haystack", ["out/0k/qa1.jsonl", "out/0k/written.txt"])
def test_a_haystack_that_does_not_exist_is_said_so_first(tmp_path, capsys, monkeypatch, haystack):
    """``--haystack out/0k/qa1.jsonl``, a path no file is at (but a file this run writes), was refused as "--out='out'
    writes the rows as 'out/0k/qa1.jsonl', which --haystack=... matches: the next run would read them back". The
    reference: os.path.exists says there is nothing there."""
    import os

    monkeypatch.chdir(tmp_path)
    assert not os.path.exists(haystack)
    code, err = _generate(capsys, "--out", "out", "--haystack", haystack)
    assert code == 2 and len(err) == 1 and f"--haystack={haystack!r} does not exist" in err[0], err
    assert "read them back" not in err[0] and _listing(tmp_path) == []
