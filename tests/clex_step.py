"""A CLEX-trained step of the tiny checkpoint, shared by test_checkpoint_open and test_clex_step_override."""

from __future__ import annotations

from pathlib import Path

PLAIN = 256  # conftest.tiny_llama2_dir's max_position_embeddings


def write_clex_step(tiny_llama2_dir, sp_tokenizer_dir, dest: Path) -> Path:
    """The tiny checkpoint scaled by CLEX (t_max 2), its ODE weights moved off their initial values (a trained step's
    side file: the reference a model built from the folder must hold), written to ``dest``."""
    import torch

    from torchtune_longshort.models import load_hf_checkpoint, read_hf_config, rope_scaled, write_hf_checkpoint

    model = rope_scaled(load_hf_checkpoint(tiny_llama2_dir), "clex", 2 * PLAIN)
    with torch.no_grad():
        for p in model.layers[0].attn.pos_embeddings.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    return write_hf_checkpoint(dest, model.state_dict(), read_hf_config(tiny_llama2_dir), rope_spec=model.rope_scaling,
                               tokenizer=sp_tokenizer_dir)
