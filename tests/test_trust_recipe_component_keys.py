"""README ('Code a checkpoint names'): inside a reader, the recipe's config check too, a config component reads a
folder as that reader does unless its own ``trust_remote_code`` is given. ``tokenizer.trust_remote_code=true`` was
honoured there (the check builds the tokenizer with its arguments), ``model.trust_remote_code=true`` was not: the check
read the model's folder under ``checkpointer.trust_remote_code`` alone and refused it, though the recipe's
``hf_decoder`` imports that folder's code when given it. One rule now: a component's own key trusts the paths the folder
it reads names (the module's marker file the witness), for every read of that folder in the check."""

from __future__ import annotations

import pytest

from trust_gate import FAMILY_PATH, _folder_naming, _imported



@pytest.mark.parametrize("shared", [True, False], ids=["start folder", "model's own folder"])
def test_model_trust_remote_code_trusts_its_folder_in_the_config_check(marker, tiny_llama2_dir, sp_tokenizer_dir,
                                                                      tmp_path, shared):
    from recipe_config import make_cfg

    from torchtune_longshort.training.recipe_config import load_recipe_config

    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    start = folder if shared else tiny_llama2_dir
    out = tmp_path / "run"
    over = {"model.checkpoint_dir": str(folder)}
    with pytest.raises(ValueError, match="pass checkpointer.trust_remote_code=true"):  # no key: refused, as before
        load_recipe_config(make_cfg(start, sp_tokenizer_dir, out, **over))
    with pytest.raises(ValueError, match="pass checkpointer.trust_remote_code=true"):
        load_recipe_config(make_cfg(start, sp_tokenizer_dir, out, **over, **{"model.trust_remote_code": False}))
    assert not _imported(marker)
    config = load_recipe_config(make_cfg(start, sp_tokenizer_dir, out, **over, **{"model.trust_remote_code": True}))
    assert config.checkpointer.trust_remote_code is False and marker.exists() and not out.exists()


@pytest.mark.parametrize("shared", [True, False], ids=["start folder", "model's own folder"])
def test_a_component_false_beside_the_checkpointer_true_is_refused_naming_both(marker, tiny_llama2_dir,
                                                                                sp_tokenizer_dir, tmp_path, shared):
    """``checkpointer.trust_remote_code=true model.trust_remote_code=false``: the model's own answer refuses the folder
    (hf_decoder alone, the reference), yet the check imported it under the checkpointer's and said OK; now refused
    in one line naming both keys, before anything is imported."""
    from recipe_config import make_cfg

    from torchtune_longshort.models import hf_decoder
    from torchtune_longshort.training.recipe_config import load_recipe_config

    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    with pytest.raises(ValueError, match="pass model.trust_remote_code=true"):
        hf_decoder(checkpoint_dir=str(folder), trust_remote_code=False)
    assert not _imported(marker)
    start = folder if shared else tiny_llama2_dir
    over = {"model.checkpoint_dir": str(folder), "checkpointer.trust_remote_code": True,
            "model.trust_remote_code": False}
    with pytest.raises(ValueError) as err:
        load_recipe_config(make_cfg(start, sp_tokenizer_dir, tmp_path / "run", **over))
    assert str(err.value).startswith("model.trust_remote_code=false contradicts checkpointer.trust_remote_code=true")
    assert "\n" not in str(err.value) and not _imported(marker) and not (tmp_path / "run").exists()


def test_the_checkpointer_false_beside_a_component_true_on_its_folder_is_refused_naming_both(
        marker, tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """``checkpointer.trust_remote_code=false model.trust_remote_code=true`` on one start folder: the checkpointer's
    false alone refuses the folder (the check without the model's key, the reference), yet with both the check
    imported the folder's code and said OK; now refused in one line naming both keys, nothing imported. Over a start
    folder that names nothing, the model's true on its own folder keeps both answers: OK."""
    from recipe_config import make_cfg

    from torchtune_longshort.training.recipe_config import load_recipe_config

    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    out, false = tmp_path / "run", {"checkpointer.trust_remote_code": False}
    with pytest.raises(ValueError, match="pass checkpointer.trust_remote_code=true"):
        load_recipe_config(make_cfg(folder, sp_tokenizer_dir, out, **false))
    with pytest.raises(ValueError) as err:
        load_recipe_config(make_cfg(folder, sp_tokenizer_dir, out, **false, **{"model.trust_remote_code": True}))
    assert str(err.value).startswith("checkpointer.trust_remote_code=false contradicts model.trust_remote_code=true")
    assert "\n" not in str(err.value) and FAMILY_PATH in str(err.value) and not _imported(marker)
    over = {**false, "model.checkpoint_dir": str(folder), "model.trust_remote_code": True}
    config = load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, **over))
    assert config.checkpointer.trust_remote_code is False and marker.exists() and not out.exists()


def test_a_rope_scaled_wrappers_false_is_no_readers_answer(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """``checkpointer.trust_remote_code=true model.trust_remote_code=false`` with ``model`` a ``rope_scaled`` wrapper
    was refused '... contradicts ...: drop model.trust_remote_code=false ..., or checkpointer.trust_remote_code=true
    not to', and taking the second answer met the next refusal: the wrapper takes no such key (its extra keys are the
    RoPE method's). The refusal is now the one the check gives without the checkpointer's true (the reference),
    naming the key's home; the same false at that home still contradicts."""
    from recipe_config import make_cfg

    from torchtune_longshort.training.recipe_config import load_recipe_config

    wrapper = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarn", "max_seq_len": 512,
               "model": {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "${checkpoint_dir}"}}
    out, false = tmp_path / "run", {"model.trust_remote_code": False}

    def refusal(**over):
        with pytest.raises(ValueError) as err:
            load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, model=wrapper, **over))
        return str(err.value)

    reference = refusal(**false)
    assert reference.startswith("model.trust_remote_code=False is not an argument of RoPE method 'yarn' (did you "
                                "mean 'model.model.trust_remote_code'?")
    assert refusal(**false, **{"checkpointer.trust_remote_code": True}) == reference
    inner = refusal(**{"model.model.trust_remote_code": False, "checkpointer.trust_remote_code": True})
    assert inner.startswith("model.model.trust_remote_code=false contradicts checkpointer.trust_remote_code=true")
    assert not out.exists()
