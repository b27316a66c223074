"""A relative recorded base (PEFT records ``base``, the path its user loaded the model by from the folder they trained
in) was looked for only above the adapter: an unrelated model folder of the same name nearer the adapter
(``proj/runs/base``) was taken for it. ``longshort-eval peft-base runs/step_1 --out b``, run in the training folder,
linked that other model's weights, and ``--base base`` (the real one) was refused: "--base base: not the checkpoint
these adapters were trained on ... (another content)". It now resolves the record first as PEFT's ``AutoPeftModel``
does, by transformers' rule: ``os.path.isdir(base_model_name_or_path)`` from the current folder, where that folder
holds the adapter (the reference: the folder ``AutoPeftModelForCausalLM.from_pretrained`` loads, its weights
compared)."""

from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("peft")

from test_peft_relative_base import _adapter  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from torchtune_longshort.eval.peft_base import main  # noqa: E402

PROG = "longshort-eval peft-base"


def _model(folder, seed: int) -> None:
    torch.manual_seed(seed)
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=2, intermediate_size=24)).save_pretrained(str(folder))


def test_a_relative_recorded_base_is_first_the_folder_peft_loads_from_here(tmp_path, monkeypatch):
    from peft import AutoPeftModelForCausalLM

    proj = tmp_path / "proj"
    monkeypatch.chdir(tmp_path)
    _model(proj / "base", seed=0)
    _model(proj / "runs" / "base", seed=1)  # another model of the same name, nearer the adapter
    monkeypatch.chdir(proj)
    _adapter("base", "", merged="runs/step_1")  # trained in proj on ./base: PEFT records 'base'
    adapter = proj / "runs" / "step_1" / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == "base"
    loaded = AutoPeftModelForCausalLM.from_pretrained(str(adapter)).get_base_model()  # the reference
    embeddings = [LlamaForCausalLM.from_pretrained(str(d)).get_input_embeddings().weight for d in ("base", "runs/base")]
    assert torch.equal(loaded.get_input_embeddings().weight, embeddings[0])
    assert not torch.equal(embeddings[0], embeddings[1])  # the other folder: another model

    assert main(["runs/step_1", "--out", "b"], PROG) == 0
    assert os.path.samefile(proj / "b" / "model.safetensors", proj / "base" / "model.safetensors")
    assert main(["runs/step_1", "--out", "c", "--base", "base"], PROG) == 0  # refused before
