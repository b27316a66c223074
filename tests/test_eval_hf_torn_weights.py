"""``longshort-eval run --model hf --model_args pretrained=<folder>`` whose weight file was cut short (a copy, a full
disk): refused before lm-eval starts, naming the file (it was safetensors' traceback from transformers, exit 1)."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from torchtune_longshort.eval.other_model_args import refuse_missing_folder


def _folder(root, name="model.safetensors", index=False):
    d = root / "run" / "step_2"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": torch.arange(4096, dtype=torch.float32)}, str(d / name))
    if index:
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": name}}))
    return d / name


@pytest.mark.parametrize("name,index", [("model.safetensors", False), ("model-00001-of-00001.safetensors", True)])
@pytest.mark.parametrize("spelled", ["run/step_2", "./run/step_2"])  # hub-shaped, and written as a path
def test_a_weight_file_cut_short_is_named(tmp_path, monkeypatch, name, index, spelled):
    weights = _folder(tmp_path, name, index)
    monkeypatch.chdir(tmp_path)
    refuse_missing_folder(spelled, "hf")  # whole: nothing to say
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(Exception):  # the reference: safetensors itself cannot open what is left
        safe_open(str(weights), framework="pt")
    with pytest.raises(ValueError, match=f"cannot read weight file .*{name}.*copy or convert the checkpoint again"):
        refuse_missing_folder(spelled, "hf")


def test_a_file_no_index_names_is_not_read(tmp_path, monkeypatch):
    weights = _folder(tmp_path, "model-00001-of-00001.safetensors", index=True)
    (weights.parent / "old.safetensors").write_bytes(b"\0" * 10)  # transformers reads the index's shards only
    monkeypatch.chdir(tmp_path)
    refuse_missing_folder("run/step_2", "hf")
