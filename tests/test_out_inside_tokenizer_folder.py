"""A run's or a study's output folder inside the folder of a ``tokenizer.path`` file
(``tokenizer.path=sp/tokenizer.model output_dir=sp/run``, a SentencePiece model beside its ``tokenizer_config.json``):
the recipe took it and wrote its run among the tokenizer's files, and the study wrote its folder there and reported
every run failed (the BABILong generator, reading that file as its folder, refused its data). Such a file stands for its
folder (config/inside_input.tokenizer_input) and both are refused before anything is written. The references:
transformers' AutoTokenizer loading that folder whole, and the folders' listing before and after."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _tokenizer_folder(tmp_path: Path, sp_tokenizer_dir: Path) -> Path:
    from transformers import AutoTokenizer

    sp = tmp_path / "sp"
    shutil.copytree(sp_tokenizer_dir, sp)
    assert (sp / "tokenizer_config.json").is_file() and AutoTokenizer.from_pretrained(str(sp)).vocab_size > 0
    return sp


def test_the_recipe_refuses_an_output_dir_in_its_tokenizer_files_folder(tmp_path, sp_tokenizer_dir, monkeypatch):
    from omegaconf import OmegaConf

    from torchtune_longshort.training.recipe_config import load_recipe_config

    sp = _tokenizer_folder(tmp_path, sp_tokenizer_dir)
    monkeypatch.chdir(tmp_path)
    before = _listing(tmp_path)
    cfg = OmegaConf.merge(OmegaConf.load(ROOT / "configs/tiny/longshort_stdlib.yaml"),
                          OmegaConf.from_dotlist(["tokenizer.path=sp/tokenizer.model", "output_dir=sp/run"]))
    with pytest.raises(ValueError) as e:  # the config check tune run and longshort-validate ask first
        load_recipe_config(cfg)
    assert (f"output_dir='{sp}/run' lies inside the folder '{sp}' of tokenizer.path='{sp}/tokenizer.model', which "
            "this run reads") in str(e.value), str(e.value)
    assert _listing(tmp_path) == before
    from torchtune_longshort.config.inside_input import refuse_inside_input
    from torchtune_longshort.training.recipe_config.inputs import folders_apart

    inputs = [("tokenizer.path", sp / "tokenizer.model")]  # beside it, or a bare file's folder: taken
    refuse_inside_input("output_dir", "run", folders_apart(inputs), "the run")
    (sp / "tokenizer_config.json").unlink()
    refuse_inside_input("output_dir", "sp/run", folders_apart(inputs), "the run")


def test_the_study_refuses_an_out_in_its_tokenizer_files_folder(tmp_path, sp_tokenizer_dir, tiny_llama2_dir, capsys):
    from torchtune_longshort.study.__main__ import main

    sp = _tokenizer_folder(tmp_path, sp_tokenizer_dir)
    raw = yaml.safe_load((ROOT / "configs/study/cpu_small.yaml").read_text())
    # a start checkpoint and its tokenizer file, which every fine-tune reads (tokenizer.path)
    raw["base"] = {"checkpoint_dir": str(tiny_llama2_dir), "tokenizer": str(sp / "tokenizer.model")}
    raw["model"] = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(tiny_llama2_dir)}
    raw.pop("recipe_overrides")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(raw))
    before = _listing(tmp_path)
    assert main(["--config", str(tmp_path / "study.yaml"), "--quick", "--repo-root", str(ROOT), "--out",
                 str(sp / "study")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"lies inside the folder '{sp}' of tokenizer.path='{sp}/tokenizer.model'" in err
    assert _listing(tmp_path) == before
