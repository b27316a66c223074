"""``longshort-eval run --model hf --model_args pretrained=<run>/step_3,peft=<run>/step_2/adapter`` (an earlier step's
adapters on a later merged step of the same LoRA run) was evaluated without a word: a tiny run's perplexity read
487.89, neither step's, exit 0 (the check refused the adapter's own step folder alone). A step folder of a LoRA run
(its ``adapter/`` beside the merged weights) other than the adapter's recorded base is now refused before lm-eval
starts, in one line naming both and the two right ways. PEFT's own ``PeftModel.from_pretrained`` on the same folders
is the reference: on the later step it gives neither merged step's logits; on the recorded base, the merged step's."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("lm_eval")
pytest.importorskip("peft")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv  # noqa: E402

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
IDS = torch.tensor([[1, 5, 9, 3, 7, 2, 11, 4]])


def _check(pretrained, adapter):
    check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", "--model", "hf", "--device", "cpu",
                                  "--model_args", f"pretrained={pretrained},peft={adapter}"]))


def _logits(model):
    with torch.no_grad():
        return model(IDS).logits


def _step(run, k, base_dir, seed):
    """``run/step_<k>``: the base with seeded adapters merged, and ``adapter/`` (PEFT's files + the layout file)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    peft_model = get_peft_model(LlamaForCausalLM.from_pretrained(str(base_dir)),
                                LoraConfig(r=4, lora_alpha=8, target_modules=MODULES, init_lora_weights=False))
    step = run / f"step_{k}"
    peft_model.save_pretrained(str(step / "adapter"))
    (step / "adapter" / "longshort_adapter.json").write_text(json.dumps({"rank": 4, "base_quantization": None}))
    peft_model.merge_and_unload().save_pretrained(str(step))
    return step


def _base_and_two_steps(tmp_path):
    """A tiny random base and steps 2 and 3 of one LoRA run on it."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64)
    base = tmp_path / "base"
    LlamaForCausalLM(config).save_pretrained(str(base))
    run = tmp_path / "run"
    return base, _step(run, 2, base, seed=2), _step(run, 3, base, seed=3)


def test_an_earlier_steps_adapter_on_a_later_merged_step_is_refused(tmp_path):
    from peft import PeftModel

    base, step2, step3 = _base_and_two_steps(tmp_path)
    merged2, merged3 = (_logits(LlamaForCausalLM.from_pretrained(str(s))) for s in (step2, step3))
    on_step3 = _logits(PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(step3)), str(step2 / "adapter")))
    assert not torch.allclose(on_step3, merged2, atol=1e-4) and not torch.allclose(on_step3, merged3, atol=1e-4)
    on_base = _logits(PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(base)), str(step2 / "adapter")))
    assert torch.allclose(on_base, merged2, atol=1e-4)  # the reference: the adapters belong on their base

    with pytest.raises(ValueError) as e:
        _check(step3, step2 / "adapter")
    line = str(e.value)
    assert "\n" not in line
    assert line == (f"--model_args peft={step2 / 'adapter'} with pretrained={step3}: that folder is a step of a LoRA "
                    f"run, its weights hold its own adapters ({step3 / 'adapter'}) merged already, and these adapters "
                    f"were trained on {base}, so both would be applied; evaluate the merged step alone (pretrained="
                    f"{step2}, no peft=), or put the adapters on their base (pretrained={base},peft="
                    f"{step2 / 'adapter'})")
    _check(base, step2 / "adapter")  # the recorded base: passes

    # a chained run: adapters trained on another LoRA run's merged step (recorded as their base) still pass there
    chained = _step(tmp_path / "chained", 1, step3, seed=4)
    _check(step3, chained / "adapter")


def test_a_plain_peft_adapter_on_a_lora_step_it_was_not_trained_on_is_refused(tmp_path):
    """A plain PEFT adapter folder (adapter_config.json + weights, no longshort_adapter.json: trained with PEFT
    directly, or the recipe's with that file removed) on a LoRA run's merged step was left to PEFT, which applied it
    on top of the merged adapters (the tiny run's walk: ppl 529.90 on step_4 where step_2 gives 549.02 and step_4
    530.98; 545.72 on its own step_2), exit 0. PEFT's own load on the same folders is the reference."""
    import shutil

    from peft import PeftModel

    base, step2, step3 = _base_and_two_steps(tmp_path)
    plain = tmp_path / "plain"
    shutil.copytree(step2 / "adapter", plain, ignore=shutil.ignore_patterns("longshort_adapter.json"))
    merged2 = _logits(LlamaForCausalLM.from_pretrained(str(step2)))
    for step in (step2, step3):
        on_step = _logits(PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(step)), str(plain)))
        assert not torch.allclose(on_step, merged2, atol=1e-4)  # the adapters on top of merged ones: another model
        with pytest.raises(ValueError) as e:
            _check(step, plain)
        assert str(e.value) == (
            f"--model_args peft={plain} with pretrained={step}: that folder is a step of a LoRA run, its weights "
            f"hold its own adapters ({step / 'adapter'}) merged already, and these adapters were trained on {base}, "
            f"so both would be applied; put the adapters on their base (pretrained={base},peft={plain})")
    on_base = _logits(PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(base)), str(plain)))
    assert torch.allclose(on_base, merged2, atol=1e-4)
    _check(base, plain)  # their recorded base: passes

    # the recipe's adapter with its layout file removed in place, on its own step: named with its step
    (step2 / "adapter" / "longshort_adapter.json").unlink()
    with pytest.raises(ValueError, match=r"so both would be applied; evaluate the merged step alone \(pretrained="
                       + str(step2).replace("\\", "\\\\") + ", no peft="):
        _check(step2, step2 / "adapter")

    # a plain adapter trained with PEFT on the merged step itself (recorded as its base) still passes there
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(5)
    on3 = get_peft_model(LlamaForCausalLM.from_pretrained(str(step3)),
                         LoraConfig(r=4, lora_alpha=8, target_modules=MODULES, init_lora_weights=False))
    on3.save_pretrained(str(tmp_path / "on3"))
    _check(step3, tmp_path / "on3")


def yarn_run(tmp_path):
    """:func:`_base_and_two_steps` of a run that changed the RoPE: YaRN x2 over the base's 64 positions, in the
    steps' config.json."""
    base, step2, step3 = _base_and_two_steps(tmp_path)
    for step in (step2, step3):
        config = json.loads((step / "config.json").read_text())
        config["max_position_embeddings"] = 128
        config["rope_parameters"] = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64,
                                     "rope_theta": config.get("rope_parameters", {}).get("rope_theta", 10000.0)}
        (step / "config.json").write_text(json.dumps(config))
    return base, step2, step3


def test_the_way_on_for_a_run_that_changed_the_rope_is_a_base_the_check_accepts(tmp_path):
    """A YaRN LoRA run (SmolLM2, realwalk2): ``pretrained=run/step_2,peft=run/step_3/adapter`` was refused with the
    way on ``put the adapters on their base (pretrained=<start>,peft=...)``, which the next run refused in turn (the
    start loads with its own RoPE, not the run's). The way on now names a folder of the base's weights and the step's
    config.json; built so, the check accepts it, and PEFT on it gives the merged step's logits (the reference)."""
    import shutil

    from peft import PeftModel

    base, step2, step3 = yarn_run(tmp_path)
    adapter = step3 / "adapter"
    with pytest.raises(ValueError, match="another model"):
        _check(base, adapter)  # the start as it is: refused for its RoPE
    with pytest.raises(ValueError) as e:
        _check(step2, adapter)
    line = str(e.value)
    assert "\n" not in line and f"pretrained={base},peft=" not in line
    told_out = tmp_path / "run_step_3_base"  # beside the run, and the command that writes it
    assert (f"pretrained={told_out},peft={adapter}, after longshort-eval peft-base {step3} --out {told_out} writes "
            f"that folder of the weights of {base} and {step3 / 'config.json'}") in line

    told = tmp_path / "told"  # the folder the line describes
    told.mkdir()
    for f in base.iterdir():
        if f.name != "config.json":
            shutil.copy(f, told / f.name)
    shutil.copy(step3 / "config.json", told / "config.json")
    _check(told, adapter)
    merged = _logits(LlamaForCausalLM.from_pretrained(str(step3)))
    on_told = _logits(PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(str(told)), str(adapter)))
    assert torch.allclose(on_told, merged, atol=1e-4)
