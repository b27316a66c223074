"""A new run from a CLEX checkpoint whose side file (``longshort_rope/rope_params.safetensors``) holds the learned
ODE's parameters under their names but in other shapes (another model width's, a hand edit) is refused naming that
file, before its tensors reach the model: the model's own CLEX parameters give the shapes (the reference), and the
file's are written with safetensors' own writer one row longer. Removing the shape comparison passed every test."""

from __future__ import annotations

import pytest


def test_a_side_file_of_other_shapes_is_refused_naming_it(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    import torch
    from safetensors.torch import save_file

    from torchtune_longshort.models import load_hf_checkpoint, read_hf_config, rope_scaled, write_hf_checkpoint
    from torchtune_longshort.models.hf_rope import ROPE_SIDE_FILE
    from torchtune_longshort.training.learned_rope import learned_rope_modules, start_learned_rope

    base = load_hf_checkpoint(tiny_llama2_dir)
    model = rope_scaled(base, "clex", 4 * base.max_seq_len)
    folder = write_hf_checkpoint(tmp_path / "clex_ckpt", model.state_dict(), read_hf_config(tiny_llama2_dir),
                                 rope_spec=model.rope_scaling, tokenizer=sp_tokenizer_dir)
    (module,) = learned_rope_modules(model)
    own = {k: p.detach() for k, p in module.named_parameters(recurse=False)}
    assert own and set(start_learned_rope(model, folder, seed=0)) == set(own)  # the file as written fits
    longer = {k: torch.cat([v, v[:1]]).contiguous() for k, v in own.items()}
    save_file(longer, str(folder / ROPE_SIDE_FILE))
    with pytest.raises(ValueError) as err:
        start_learned_rope(model, folder, seed=0)
    message = str(err.value)
    assert str(folder / ROPE_SIDE_FILE) in message
    for k, v in own.items():
        assert f"'{k}': {tuple(longer[k].shape)}" in message and f"'{k}': {tuple(v.shape)}" in message
