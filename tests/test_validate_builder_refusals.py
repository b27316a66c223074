"""longshort-validate refuses what the run's model build refuses in a folder's config.json. A config.json whose
torchtune builder cannot build it (a Phi-4-mini-style phi3 rotating 3/4 of each head, a Qwen2 with
use_sliding_window=true, a llama with attention biases or a head size of its own) passed ``longshort-validate``
('OK') and was refused only when ``tune run`` built the model; the check now builds it on the meta device and gives
the run's own line (``load_hf_checkpoint``'s refusal the reference), exit 2, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest
from omegaconf import OmegaConf
from recipe_config import make_cfg

CASES = {
    "phi3": {"partial_rotary_factor": 0.75, "rope_parameters": None},
    "qwen2": {"use_sliding_window": True, "sliding_window": 32},
    "llama2": {"attention_bias": True},
}


@pytest.mark.parametrize("layout", sorted(CASES))
def test_a_config_json_the_builder_refuses_is_refused_by_the_check_as_the_run_refuses_it(
        layout, family_dirs, tmp_path, monkeypatch, capsys):
    from torchtune_longshort.models import UnsupportedModelError, load_hf_checkpoint
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    folder = tmp_path / "ckpt"
    shutil.copytree(family_dirs[layout], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(CASES[layout])
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError) as built:  # the run's build: the reference
        load_hf_checkpoint(folder)
    run = make_cfg(folder, folder, tmp_path / "out", tokenizer={
        "_component_": "torchtune_longshort.models.checkpoint_tokenizer", "path": str(folder)})
    OmegaConf.update(run, "checkpointer.model_type", None, force_add=True)
    OmegaConf.save(run, tmp_path / "run.yaml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        validate_main(["run.yaml"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"longshort-validate: error: {built.value}"]
    assert not (tmp_path / "out").exists()


def test_a_tied_phi4_mini_config_is_refused_naming_its_partial_rotation_as_the_untied_one_is(family_dirs):
    # Phi-4-mini's config.json ties its embeddings: it was refused as 'not a supported model family' (the phi3 row
    # reads untied folders), listing phi3 among the supported ones, where README names partial_rotary_factor
    from torchtune_longshort.models import UnsupportedModelError
    from torchtune_longshort.models.families import family_of
    from torchtune_longshort.models.family_builders import build_phi3

    cfg = json.loads((family_dirs["phi3"] / "config.json").read_text())
    phi4_mini = dict(cfg, partial_rotary_factor=0.75, rope_parameters=None)
    with pytest.raises(UnsupportedModelError) as untied:  # the phi3 builder's own refusal: the reference
        build_phi3(phi4_mini, 256, None)
    with pytest.raises(UnsupportedModelError) as tied:
        family_of(dict(phi4_mini, tie_word_embeddings=True), "c/config.json")
    assert str(tied.value) == f"c/config.json: {untied.value}"
    with pytest.raises(UnsupportedModelError, match=r"\(family phi3 reads model_type 'phi3', untied only\)\. A "):
        family_of(dict(cfg, tie_word_embeddings=True), "c/config.json")
