"""A length no memory can hold is refused in one line before anything is allocated (it was an out-of-memory kill
of the process, and of others on the machine: ``longshort-eval --model_args max_length=99999999`` built a RoPE table
of that many positions even though, without ``allow_extrapolation``, it never runs past the checkpoint's 256).

Each case would allocate far more than any machine's memory (hundreds of GiB) if the check came after the
allocation: the test process would be killed, not pass."""

from __future__ import annotations

import psutil
import pytest
import torch

ABSURD = 10**9  # positions: at head_dim 16 about 164 GiB to build one table


def test_a_rope_table_past_free_memory_is_refused_before_it_is_built():
    from torchtune_longshort.rope.base import default_inv_freq, rope_cache, rope_table_bytes

    theta = default_inv_freq(16, 10_000.0)
    assert rope_cache(theta, 8).shape == (8, 8, 2)
    assert rope_table_bytes(ABSURD, 16) > 100 * 2**30
    with pytest.raises(ValueError, match=r"a RoPE table of 1,000,000,000 positions \(head_dim 16\) takes about "
                                         r"\d+\.\d GiB, more than the \d+\.\d GiB free on cpu; ask for fewer"):
        rope_cache(theta, ABSURD)


def test_a_checkpoint_loaded_for_an_absurd_length_is_refused_naming_it(tiny_llama2_dir):
    from torchtune_longshort.models import load_hf_checkpoint

    with pytest.raises(ValueError, match=r"checkpoint '.*' with RoPE tables for 1,000,000,000 positions takes "
                                         r"about \d+\.\d GiB, more than .* free on cpu; ask for fewer positions "
                                         r"\(max_seq_len\)"):
        load_hf_checkpoint(tiny_llama2_dir, max_seq_len=ABSURD)


def test_a_model_from_dimensions_for_an_absurd_length_is_refused(tiny_llama2_dir):
    from torchtune_longshort.models.hf_model import hf_decoder

    with torch.device("cpu"), pytest.raises(ValueError, match=r"RoPE table of 1,000,000,000 positions"):
        hf_decoder(family="llama", vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32,
                   intermediate_dim=64, max_seq_len=ABSURD)


def test_the_eval_model_builds_only_the_positions_it_runs(tiny_llama2_dir, sp_tokenizer_dir):
    """Without allow_extrapolation a request past the checkpoint's positions is refused, so its RoPE is built for
    those positions, whatever max_length says; with it, the absurd length is refused as above."""
    from torchtune_longshort.eval.model.args import load_checkpoint_model, parse_model_args

    tok = str(sp_tokenizer_dir)
    args = parse_model_args(pretrained=str(tiny_llama2_dir), tokenizer=tok, max_length=ABSURD, device="cpu")
    model = load_checkpoint_model(args)
    assert {m.attn.pos_embeddings.max_seq_len for m in model.layers} == {args.usable_length} == {256}
    args = parse_model_args(pretrained=str(tiny_llama2_dir), tokenizer=tok, max_length=ABSURD, allow_extrapolation=True,
                            device="cpu")
    with pytest.raises(ValueError, match=r"RoPE tables for 1,000,000,000 positions .* ask for fewer positions "
                                         r"\(max_length in --model_args\)"):
        load_checkpoint_model(args)


def test_a_containers_limit_bounds_the_free_memory(tmp_path, monkeypatch):
    """In a container the kernel kills at the container's limit, however much the host has free: a 1 GiB limit
    (cgroup v2's ``memory.max``; "max" means none) refuses a table of about 2 GiB that the host could hold."""
    from torchtune_longshort import devices
    from torchtune_longshort.rope.base import default_inv_freq, rope_cache, rope_table_bytes

    limit = tmp_path / "memory.max"
    monkeypatch.setattr(devices, "CGROUP_LIMITS", (str(limit),))
    positions = 2**30 // (4 * (1 + 5 * 8)) * 2  # about 2 GiB to build at head_dim 16
    assert 1.9 * 2**30 < rope_table_bytes(positions, 16) < 2.1 * 2**30
    limit.write_text("max\n")
    assert devices.free_bytes("cpu") == pytest.approx(psutil.virtual_memory().available, rel=0.2)
    limit.write_text(f"{2**30}\n")
    assert devices.free_bytes("cpu") <= 2**30
    with pytest.raises(ValueError, match=r"takes about 2\.0 GiB, more than the 1\.0 GiB free on cpu"):
        rope_cache(default_inv_freq(16, 10_000.0), positions)


def test_longshort_eval_refuses_an_absurd_length_before_lm_eval_starts(tiny_llama2_dir, sp_tokenizer_dir):
    """``longshort-eval``'s pre-check (before lm-eval's start-up log and task loading) checks the length as the
    model's constructor does: with ``allow_extrapolation=true`` a length whose RoPE tables no memory holds was passed
    on and refused only when lm-eval built the model; a length that fits still passes."""
    from torchtune_longshort.eval.cli_run import check_arguments

    argv = ["run", "--model", "longshort", "--model_args",
            f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},max_length={ABSURD},allow_extrapolation=true",
            "--tasks", "longshort_ppl", "--device", "cpu", "--metadata", '{"max_seq_lengths": "256"}']
    with pytest.raises(ValueError, match=r"RoPE tables for 1,000,000,000 positions .* ask for fewer positions "
                                         r"\(max_length in --model_args\)"):
        check_arguments(argv)
    check_arguments([a.replace(f"max_length={ABSURD}", "max_length=512") for a in argv])
    check_arguments([a.replace(",allow_extrapolation=true", "") for a in argv])  # runs only the covered 256
