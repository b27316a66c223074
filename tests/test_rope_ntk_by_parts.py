"""NTK-by-parts against transformers' implementation of the same rule (``rope_type: yarn``, ``attention_factor: 1``)
on the same weights, beyond the original context; and its checkpoint folder loads in transformers."""

from __future__ import annotations

import torch

from test_rope_hf_parity import ATOL, ORIG, SEQ, TARGET, VOCAB, sharp_checkpoint
from torchtune_longshort.models import load_hf_checkpoint, save_hf_checkpoint

HF_ENTRY = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG, "attention_factor": 1.0}
SPEC = {"method": "ntk_by_parts", "factor": 4.0, "original_max_seq_len": ORIG}


def test_logits_match_transformers_and_differ_from_yarn(tmp_path):
    hf = sharp_checkpoint(tmp_path / "hf", HF_ENTRY, TARGET)
    ours = load_hf_checkpoint(tmp_path / "hf", rope=SPEC, max_seq_len=TARGET)
    yarn = load_hf_checkpoint(tmp_path / "hf", rope={**SPEC, "method": "yarn"}, max_seq_len=TARGET)
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, got, with_temperature = hf(tokens).logits, ours(tokens), yarn(tokens)
    assert (got - ref).abs().max().item() < ATOL
    assert (with_temperature - ref).abs().max().item() > 100 * ATOL  # YaRN's temperature is what it leaves out


def test_saved_folder_loads_in_transformers(tmp_path, sp_tokenizer_dir):
    from transformers import AutoModelForCausalLM

    sharp_checkpoint(tmp_path / "hf", None, ORIG)
    model = load_hf_checkpoint(tmp_path / "hf", rope=SPEC, max_seq_len=TARGET)
    out = save_hf_checkpoint(model, tmp_path / "out", tmp_path / "hf", tokenizer=sp_tokenizer_dir)
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    tokens = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(tokens)
        assert (hf(tokens).logits - ref).abs().max().item() < ATOL
        assert (load_hf_checkpoint(out)(tokens) - ref).abs().max().item() < 1e-5
