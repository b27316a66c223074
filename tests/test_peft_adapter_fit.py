"""``longshort-eval run --model hf --model_args pretrained=<folder>,peft=<adapter>`` with an adapter trained on a model
of other shapes (a LoRA run's ``step_<k>/adapter`` with the start checkpoint of another run: 4 KV heads and an MLP of
384 where the run's base had 2 and 344) failed once lm-eval had loaded the model, in PEFT's ``size mismatch for
base_model.model.model.layers.0...lora_B.default.weight`` traceback, exit 1; it is now refused before lm-eval starts,
in one line naming a module, the two sizes and the model the adapter was trained on (``eval.peft_fit``). PEFT's own
``PeftModel.from_pretrained`` on the same folders is the reference: it fails where the check refuses and loads where
the check passes."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("lm_eval")
peft = pytest.importorskip("peft")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv  # noqa: E402
from torchtune_longshort.eval.other_model_args import check_other_model_args  # noqa: E402


def _model(folder, kv_heads, mlp):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=kv_heads, intermediate_size=mlp, max_position_embeddings=128,
                         tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    return LlamaForCausalLM.from_pretrained(str(folder))  # PEFT records the folder as the adapter's base


def _check(pretrained, adapter):
    check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", "--model", "hf", "--device", "cpu",
                                  "--model_args", f"pretrained={pretrained},peft={adapter}"]))


def test_an_adapter_of_other_shapes_is_refused_before_lm_eval_starts(tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    base = _model(tmp_path / "base", kv_heads=2, mlp=96)
    other = tmp_path / "other"
    _model(other, kv_heads=4, mlp=128)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                        "up_proj", "down_proj"], init_lora_weights=False)
    adapter = tmp_path / "adapter"
    get_peft_model(base, lora).save_pretrained(str(adapter))

    with pytest.raises(RuntimeError, match="size mismatch"):  # the reference: PEFT cannot load it on `other`
        PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(other)), str(adapter))
    with pytest.raises(ValueError) as e:
        _check(other, adapter)
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith(f"--model_args peft={adapter} with pretrained={other}: the adapters do not fit that model")
    assert "(model.layers.0.mlp.down_proj: its weight is 64 x 128, the adapter's lora_A has 96 columns where it " \
           "needs 128)" in line
    assert line.endswith(f"trained on {tmp_path / 'base'}; give that folder as pretrained=, or the adapter of a run "
                         "on this one")

    # recorded against a hub name no folder here holds (PEFT's record of from_pretrained("HuggingFaceTB/...")):
    # that model is named as one, not as a folder (huggingface_hub's validate_repo_id accepts the name)
    import json

    from huggingface_hub.utils import validate_repo_id

    validate_repo_id("HuggingFaceTB/SmolLM2-135M")
    config = json.loads((adapter / "adapter_config.json").read_text())
    hub_adapter = tmp_path / "hub_adapter"
    hub_adapter.mkdir()
    (hub_adapter / "adapter_model.safetensors").write_bytes((adapter / "adapter_model.safetensors").read_bytes())
    config["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M"
    (hub_adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as e:
        _check(other, hub_adapter)
    assert str(e.value).endswith("trained on HuggingFaceTB/SmolLM2-135M (a local path relative to where they were "
                                 "trained, or a hub model); give that model as pretrained=, or the adapter of a run "
                                 "on this one")

    PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(tmp_path / "base")), str(adapter))  # it fits
    check_other_model_args({"pretrained": str(tmp_path / "base"), "peft": str(adapter)}, "hf")  # not refused


def test_a_relative_record_found_above_the_adapter_is_named_as_that_folder(tmp_path, monkeypatch):
    """Trained from ``work`` by ``from_pretrained("base")`` (PEFT records 'base') and refused on a model of other
    shapes from another folder, the line said 'trained on base (a local path relative to where they were trained, or
    a hub model); give that model as pretrained='; it names work/base, the folder PEFT loads the adapter on."""
    from peft import LoraConfig, PeftModel, get_peft_model

    (tmp_path / "work").mkdir(), (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    base = _model("base", kv_heads=2, mlp=96)
    _model(tmp_path / "other", kv_heads=4, mlp=128)
    get_peft_model(base, LoraConfig(r=2, target_modules=["down_proj"], init_lora_weights=False)).save_pretrained("a")
    monkeypatch.chdir(tmp_path / "elsewhere")
    adapter = tmp_path / "work" / "a"
    PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(tmp_path / "work" / "base")), str(adapter))
    with pytest.raises(ValueError) as e:
        check_other_model_args({"pretrained": str(tmp_path / "other"), "peft": str(adapter)}, "hf")
    assert str(e.value).endswith(f"trained on base (relative to the folder they were trained in: {tmp_path / 'work'}"
                                 "/base, found above the adapter); give that folder as pretrained=, or the adapter "
                                 "of a run on this one")
