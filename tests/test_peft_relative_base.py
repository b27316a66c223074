"""An adapter trained with PEFT on a base loaded by a relative path records that path (``base_model_name_or_path``:
what the user passed to ``from_pretrained``). The check that refuses an adapter on a LoRA run's step it was not
trained on resolved that record from the folder the command ran in: a chained adapter (trained on a LoRA step, so
recorded as ``run/step_2``) given with that very step was passed from the training folder and refused from /tmp,
"... these adapters were trained on run/step_2, so both would be applied; ... put the adapters on their base
(pretrained=run/step_2,...)". The answer no longer depends on the folder the command runs in. PEFT's own record of
the relative path is the reference."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("peft")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from torchtune_longshort.eval.other_model_args import check_peft_args  # noqa: E402

MODULES = ["q_proj", "v_proj"]


def _adapter(base_by: str, out: str, merged: str = "") -> None:
    """PEFT's adapter of the model loaded by ``base_by`` (relative, from the current folder) saved to ``out``; with
    ``merged``, the merged weights there and the adapter at ``merged/adapter`` (a LoRA run's step)."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(LlamaForCausalLM.from_pretrained(base_by),
                           LoraConfig(r=2, lora_alpha=4, target_modules=MODULES, init_lora_weights=False))
    model.save_pretrained(os.path.join(merged, "adapter") if merged else out)
    if merged:
        model.merge_and_unload().save_pretrained(merged)


def _chained_run(root, monkeypatch) -> None:
    """Under ``root``: a model ``base``, a LoRA run's step ``run_a/step_2`` trained on it, and ``run_a/chained``, an
    adapter trained on that step from ``run_a`` (PEFT records 'step_2'); the command then runs in ``run_a``."""
    monkeypatch.chdir(root)
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=2, intermediate_size=24)).save_pretrained("base")
    _adapter("base", "", merged="run_a/step_2")
    monkeypatch.chdir(root / "run_a")
    _adapter("step_2", "chained")

def test_a_relative_recorded_base_gives_the_same_answer_from_any_folder(tmp_path, monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(work)
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=2, intermediate_size=24)).save_pretrained("base")
    _adapter("base", "", merged="run/step_2")  # a LoRA run's step: merged weights + adapter/
    _adapter("run/step_2", "plain")  # a chained adapter, trained on that step
    recorded = json.loads((work / "plain" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == "run/step_2"  # the reference: what PEFT records

    step, plain, own = work / "run" / "step_2", work / "plain", work / "run" / "step_2" / "adapter"
    for folder in (work, elsewhere):
        monkeypatch.chdir(folder)
        check_peft_args(str(step), str(plain))  # its recorded base: passes from both (refused from elsewhere before)
    for folder in (work, elsewhere):
        monkeypatch.chdir(folder)
        with pytest.raises(ValueError) as e:  # the step's own adapters (recorded base 'base') on it: refused
            check_peft_args(str(step), str(own))
        # 'base' lies above the adapter (run/step_2/adapter): that folder is named, from either folder
        assert f"trained on base (relative to the folder they were trained in: {work / 'base'}, " in str(e.value)
        assert f"pretrained={work / 'base'}," in str(e.value)


@pytest.mark.parametrize("recorded, base, same", [
    ("run/step_2", "/x/run/step_2", True), ("./run/step_2/", "/x/run/step_2", True),
    ("../up/run", "/x/up/run", True), ("step_2", "/x/run/step_2", True),
    ("run/step_2", "/x/other/step_2", False), ("run/step_2", "/x/run/step_20", False),
    ("/y/run/step_2", "/x/run/step_2", False), (".", "/x/run", False),
])
def test_a_relative_record_names_the_folders_whose_path_ends_with_it(recorded, base, same, tmp_path, monkeypatch):
    from pathlib import Path

    from torchtune_longshort.eval.peft_fit import is_recorded_base

    monkeypatch.chdir(tmp_path)
    assert is_recorded_base(Path(base), recorded) is same


def test_a_relative_record_is_the_folder_above_the_adapter_that_holds_it(tmp_path, monkeypatch):
    """Trained from run_a by ``step_2`` (PEFT records 'step_2'), the adapter was accepted on run_b's step_2 (both
    runs' adapters then applied), and trained by a link's name ('base_link' -> run_a/step_2) it was refused on
    run_a/step_2 from another folder and accepted on another folder named base_link. The reference: the folder the
    training loaded (os.path.realpath of the path PEFT was given)."""
    import shutil

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "other").mkdir(parents=True), elsewhere.mkdir()
    monkeypatch.chdir(work)
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=2, intermediate_size=24)).save_pretrained("base")
    _adapter("base", "", merged="run_a/step_2"), _adapter("base", "", merged="run_b/step_2")  # two LoRA runs
    os.symlink("run_a/step_2", "base_link"), os.symlink("../run_b/step_2", "other/base_link")
    _adapter("base_link", "linked")  # trained by the link's name
    monkeypatch.chdir(work / "run_a")
    _adapter("step_2", "chained")  # trained on run_a's step_2, from run_a
    for adapter, by in ((work / "run_a" / "chained", work / "run_a" / "step_2"), (work / "linked", work / "base_link")):
        recorded = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
        assert os.path.realpath(by) == os.path.realpath(work / "run_a" / "step_2") and recorded == by.name
    shutil.copytree(work / "run_a" / "step_2", work / "copy_a")  # the same files elsewhere
    for folder in (work, elsewhere, work / "run_b"):
        monkeypatch.chdir(folder)
        for adapter, by, other in ((work / "run_a" / "chained", work / "run_a" / "step_2", work / "run_b" / "step_2"),
                                   (work / "linked", work / "base_link", work / "other" / "base_link")):
            for same in (work / "run_a" / "step_2", work / "copy_a"):
                check_peft_args(str(same), str(adapter))  # the folder the training loaded, or a copy: passes
            with pytest.raises(ValueError, match="both would be applied") as e:  # the same name, another run's
                check_peft_args(str(other), str(adapter))
            assert f"put the adapters on their base (pretrained={by},peft={adapter})" in str(e.value)


def test_a_folder_of_the_recorded_name_that_no_model_loads_from_is_not_the_recorded_base(tmp_path, monkeypatch):
    """A chained adapter trained from run_a on ``step_2`` and copied to ``proj/copies`` was refused on run_a's step_2
    ("trained on step_2 (... <tmp>/step_2, found above the adapter), so both would be applied"), as a folder named
    step_2 higher up, holding no model, was taken for its base. The reference: transformers loads no model from it."""
    import shutil

    proj = tmp_path / "proj"
    (tmp_path / "step_2").mkdir(), (tmp_path / "step_2" / "notes.txt").write_text("not a model\n")
    (proj / "run_a").mkdir(parents=True)
    _chained_run(proj, monkeypatch)
    shutil.copytree(proj / "run_a" / "chained", proj / "copies" / "chained")
    with pytest.raises(OSError):  # the reference: no model is loaded from the folder of that name above
        LlamaForCausalLM.from_pretrained(str(tmp_path / "step_2"))
    check_peft_args(str(proj / "run_a" / "step_2"), str(proj / "copies" / "chained"))  # refused before


def test_a_checkpoint_file_that_cannot_be_read_is_refused_as_itself(tmp_path, monkeypatch):
    """A copy of run_a's step_2 whose weight file is a link to nothing, given with a chained adapter of step_2, was
    refused as another model ("these adapters were trained on step_2 ..., so both would be applied"), the fault not
    named. The reference: the errno's own text (os.strerror)."""
    import errno
    import shutil

    _chained_run(tmp_path, monkeypatch)
    copy = tmp_path / "copy_a"
    shutil.copytree(tmp_path / "run_a" / "step_2", copy)
    (copy / "model.safetensors").unlink()
    os.symlink(tmp_path / "gone" / "model.safetensors", copy / "model.safetensors")
    with pytest.raises((OSError, ValueError)) as e:
        check_peft_args(str(copy), str(tmp_path / "run_a" / "chained"))
    assert str(copy / "model.safetensors") in str(e.value) and os.strerror(errno.ENOENT) in str(e.value)
    assert "both would be applied" not in str(e.value) and "\n" not in str(e.value)


def test_a_recorded_base_of_a_rope_type_this_project_does_not_read_is_still_compared(tmp_path, monkeypatch):
    """A chained adapter whose recorded base (run_a/step_2) carries a RoPE type transformers runs and this project's
    table does not ('proportional'), given on another LoRA run's step, was answered with that folder's RoPE refusal
    ("rope type 'proportional' is not supported") instead of the real answer: another model, so both would be
    applied. The reference: transformers' own table of RoPE types, and the two folders' weights (not equal)."""
    from safetensors.torch import load_file
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    _chained_run(tmp_path, monkeypatch)
    step = tmp_path / "run_a" / "step_2"
    config = json.loads((step / "config.json").read_text())
    config.pop("rope_parameters", None)
    config["rope_scaling"] = {"rope_type": "proportional", "factor": 2.0}
    (step / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    _adapter("base", "", merged="run_b/step_2")  # another LoRA run's step
    assert "proportional" in ROPE_INIT_FUNCTIONS  # a type --model hf may run
    weights = [load_file(str(d / "model.safetensors")) for d in (tmp_path / "run_b" / "step_2", step)]
    assert any(not w.equal(weights[1][k]) for k, w in weights[0].items())  # another model than the recorded base
    with pytest.raises(ValueError) as e:
        check_peft_args(str(tmp_path / "run_b" / "step_2"), str(tmp_path / "run_a" / "chained"))
    assert "both would be applied" in str(e.value) and "proportional" not in str(e.value)
