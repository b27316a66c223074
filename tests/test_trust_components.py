"""torchtune's own recipes read a step folder through this package's config components (README: ``tune run
generate`` / ``full_finetune_single_device`` with ``model._component_=torchtune_longshort.models.hf_decoder``,
``tokenizer._component_=...checkpoint_tokenizer``, ``checkpointer._component_=...FullModelHFRopeCheckpointer``), and
no reader's gate is around them there: each imported the family or RoPE method of one's own a folder's config.json
names, running its module's top-level code without asking. Outside a reader's gate each is now a reader of someone's
folder, trusted by its own ``trust_remote_code`` (the module's marker file the witness); inside one (the recipe's
config check, longshort-eval) it reads as that reader does."""

from __future__ import annotations

import pytest

from trust_gate import FAMILY_PATH, PKG, ROPE_PATH, _folder_naming, _imported, _linear_scaled
from user_modules import forget_user_module



def _refused(call, key, fix, marker):
    with pytest.raises(ValueError) as e:
        call()
    said = str(e.value)
    assert f"config.json: {key}=" in said and said.endswith(f"pass {fix}") and "\n" not in said, said
    assert not _imported(marker)


def test_hf_decoder_and_checkpoint_tokenizer_import_a_folders_family_only_when_trusted(
        marker, tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    import shutil

    from torchtune_longshort.models import checkpoint_tokenizer, hf_decoder
    from torchtune_longshort.rope.checkpoint_code import checkpoint_code

    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    shutil.copy(sp_tokenizer_dir / "tokenizer.model", folder / "tokenizer.model")
    _refused(lambda: hf_decoder(checkpoint_dir=str(folder)), "longshort_family",
             "model.trust_remote_code=true (hf_decoder's argument; from Python, trust_remote_code=True)", marker)
    _refused(lambda: checkpoint_tokenizer(str(folder)), "longshort_family",
             "tokenizer.trust_remote_code=true (checkpoint_tokenizer's argument; from Python, trust_remote_code=True)",
             marker)
    with checkpoint_code(False):  # inside a reader's gate (longshort-eval untrusted): that reader's answer
        _refused(lambda: checkpoint_tokenizer(str(folder)), "longshort_family", "trust_remote_code=True in "
                 "--model_args (or lm-eval's --trust_remote_code; from Python, the keyword trust_remote_code=True)",
                 marker)
    with checkpoint_code(True):  # a trusting reader's gate: read as it reads
        assert checkpoint_tokenizer(str(folder)).encode_plain("hello")
    assert marker.exists()
    forget_user_module(PKG)
    marker.unlink()
    assert hf_decoder(checkpoint_dir=str(folder), trust_remote_code=True) is not None and marker.exists()


def test_the_rope_checkpointer_imports_a_steps_method_only_when_trusted(marker, tiny_llama2_dir, tmp_path):
    from torchtune_longshort.models import FullModelHFRopeCheckpointer

    step = _linear_scaled(tiny_llama2_dir, tmp_path / "theirs", ROPE_PATH)
    out = tmp_path / "out"
    args = (str(step), ["model.safetensors"], "LLAMA2", str(out))
    _refused(lambda: FullModelHFRopeCheckpointer(*args), "longshort_rope.method", "checkpointer.trust_remote_code=true"
             " (FullModelHFRopeCheckpointer's argument; from Python, trust_remote_code=True)", marker)
    assert not out.exists()
    FullModelHFRopeCheckpointer(*args, trust_remote_code=True)
    assert marker.exists()
