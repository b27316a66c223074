"""longshort-validate --nproc_per_node N checks QLoRA's NF4 shapes for N processes, as tune run --nproc_per_node N's
workers do. Reference: the recipe's own config check in a worker (WORLD_SIZE=2), which refuses the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]


def test_validate_for_two_processes_refuses_a_qlora_checkpoint_two_workers_refuse(tmp_path, sp_tokenizer_dir,
                                                                                  monkeypatch, capsys):
    # A dim-128 checkpoint: each quantized weight's numel is a multiple of 16384, not of 16384 x 2. Without WORLD_SIZE
    # in the environment, longshort-validate --nproc_per_node 2 said "OK for 2 processes" (the NF4 check read the
    # launcher's WORLD_SIZE, not --nproc_per_node), and tune run --nproc_per_node 2 then refused it in each worker.
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    ckpt = write_random_llama2_checkpoint(tmp_path / "ckpt128", vocab_size=512, embed_dim=128, num_layers=2,
                                          num_heads=4, num_kv_heads=4, intermediate_dim=384, max_seq_len=256, seed=0)
    cfg = OmegaConf.load(REPO / "configs/tiny/qlora_from_checkpoint.yaml")
    cfg.checkpoint_dir, cfg.output_dir = str(ckpt), str(tmp_path / "out")
    cfg.tokenizer.path, cfg.batch_size = str(sp_tokenizer_dir / "tokenizer.model"), 4
    OmegaConf.save(cfg, tmp_path / "run.yaml")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    assert validate_main([str(tmp_path / "run.yaml")]) == 0  # one process: the shapes fit
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        validate_main([str(tmp_path / "run.yaml"), "--nproc_per_node", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    said = err.split("longshort-validate: error: ", 1)[1].strip()
    monkeypatch.setenv("WORLD_SIZE", "2")  # the reference: what a worker of tune run --nproc_per_node 2 says
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError) as worker:
        LongShortFinetuneRecipe(cfg)
    assert said == str(worker.value) and "16384 x 2 processes = 32768" in said, (said, str(worker.value))
    assert not (tmp_path / "out").exists()
