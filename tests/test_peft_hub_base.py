"""An adapter trained with PEFT on a base loaded by its hub name (``from_pretrained("HuggingFaceTB/SmolLM2-135M-
Instruct")``, the usual way) records that name. Given with a LoRA run's step folder it was not trained on, it was
refused saying "trained on HuggingFaceTB/SmolLM2-135M-Instruct (a path relative to the folder they were trained
in) ... put the adapters on their base (pretrained=<that folder>,peft=...)", a hub model taken for a folder, the
way on unnamed; so was the shape refusal, "give that folder as pretrained=". A name the Hugging Face cache holds is
now said as the hub model it is, and named as the ``pretrained=`` to give. References: PEFT's own record of the name,
and transformers loading the named ``pretrained=`` offline from that cache."""

from __future__ import annotations

import json
import re
import shutil

import pytest

pytest.importorskip("peft")

from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402

from torchtune_longshort.eval.other_model_args import check_peft_args  # noqa: E402
from torchtune_longshort.eval.peft_fit import refuse_unfitting_adapter  # noqa: E402

NAME = "tiny-org/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _llama(hidden: int) -> LlamaForCausalLM:
    return LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=2, intermediate_size=24))


def _adapter(model, out) -> None:
    from peft import LoraConfig, get_peft_model

    get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                     init_lora_weights=False)).save_pretrained(str(out))


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A Hugging Face cache holding NAME (the hub's layout: refs/main, snapshots/<commit>), as the default cache."""
    from huggingface_hub import constants

    _llama(16).save_pretrained(tmp_path / "src")
    repo = tmp_path / "cache" / ("models--" + NAME.replace("/", "--"))
    shutil.copytree(tmp_path / "src", repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "cache"


def test_an_adapter_on_a_hub_base_is_named_its_hub_model(tmp_path, monkeypatch, hub):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _adapter(LlamaForCausalLM.from_pretrained(NAME, cache_dir=str(hub), local_files_only=True), "plain")
    assert json.loads((work / "plain" / "adapter_config.json").read_text())["base_model_name_or_path"] == NAME

    step = work / "run" / "step_2"  # a LoRA run's step: merged weights + adapter/ (trained on a folder 'base')
    _llama(16).save_pretrained(work / "base")
    _adapter(LlamaForCausalLM.from_pretrained("base"), step / "adapter")
    LlamaForCausalLM.from_pretrained("base").save_pretrained(step)
    with pytest.raises(ValueError) as e:
        check_peft_args(str(step), "plain")
    said = str(e.value)
    assert "relative" not in said and f"trained on {NAME} (" in said
    named = re.search(r"put the adapters on their base \(pretrained=([^,]+),peft=plain\)", said).group(1)
    assert AutoConfig.from_pretrained(named, cache_dir=str(hub), local_files_only=True).hidden_size == 16

    _llama(32).save_pretrained(work / "wide")  # another width: the shape refusal names the hub model too
    with pytest.raises(ValueError) as e:
        refuse_unfitting_adapter(str(work / "wide"), "plain")
    assert f"trained on {NAME} (a model of the Hugging Face hub); give that model as pretrained=" in str(e.value)


def test_a_relative_folder_record_is_still_said_as_a_path(tmp_path, monkeypatch, hub):
    monkeypatch.chdir(tmp_path)
    _llama(16).save_pretrained(tmp_path / "tiny-org" / "other")
    _adapter(LlamaForCausalLM.from_pretrained("tiny-org/other"), "plain")  # a repo-id-shaped folder, not in the cache
    _llama(32).save_pretrained(tmp_path / "wide")
    with pytest.raises(ValueError) as e:
        refuse_unfitting_adapter(str(tmp_path / "wide"), "plain")
    # said as a path, and the folder above the adapter that holds it named (leftalone40's e7b1d1b), not a hub model
    said = f"tiny-org/other (relative to the folder they were trained in: {tmp_path / 'tiny-org' / 'other'}, "
    assert said + "found above the adapter); give that folder as pretrained=" in str(e.value), str(e.value)
    assert "hub" not in str(e.value)
