"""Three hand mutants of training/out_of_memory survived test_out_of_memory and test_eval_out_of_memory (mutants16):
the sequences per forward counted without world_size (a launch of 4 processes told to tile its MLP for 4x the rows
a forward carries), gradient_accumulation_steps=2x offered where the batch does not split so (a new run the config
check refuses: batch_size=3 is not divisible by ... 2), and a refusal with no resumable fix left reading 'one of:  (or
start again ...'. The references: the config check's own rule (batch_size a multiple of world_size x
gradient_accumulation_steps) and the sequences per forward, batch_size / (world_size x accumulation), written out
over a grid of launches."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from torchtune_longshort.training.out_of_memory import MLP_TILE_ROWS, remedies, stop_message


def _config(batch_size, accumulation, seq_len):
    return SimpleNamespace(batch_size=batch_size, gradient_accumulation_steps=accumulation, seq_len=seq_len,
                           enable_activation_checkpointing=True, enable_activation_offloading=False,
                           tiled_mlp_tokens=None, windows=SimpleNamespace(e_bounds=(0, 0)))


def test_the_remedies_follow_the_sequences_each_process_carries():
    seen = set()
    for world_size in (1, 2, 4):
        for accumulation in (1, 2):
            for batch_size in range(1, 17):
                if batch_size % (world_size * accumulation):
                    continue  # the config check refuses such a launch
                for seq_len in (1000, 3000, 5000):  # 2 windows x seq_len rows per sequence, never at the edge
                    micro = batch_size // (world_size * accumulation)
                    resumable, new_run = remedies(_config(batch_size, accumulation, seq_len), torch.device("cpu"),
                                                  1, world_size)
                    tiled = 2 * micro * seq_len > 2 * MLP_TILE_ROWS
                    assert (f"tiled_mlp_tokens={MLP_TILE_ROWS}" in resumable) == tiled
                    halves = micro > 1 and batch_size % (world_size * 2 * accumulation) == 0
                    offered = [r for r in new_run if r.startswith("gradient_accumulation_steps=")]
                    assert bool(offered) == halves, (world_size, accumulation, batch_size, new_run)
                    if offered:
                        assert offered[0].startswith(f"gradient_accumulation_steps={2 * accumulation} ")
                    seen.add((tiled, halves))
    assert seen == {(False, False), (False, True), (True, False), (True, True)}


def test_a_saved_step_without_a_resumable_fix_says_none_is_left():
    said = stop_message("out of memory in step 3", [], ["a shorter seq_len"], 2, "out/step_2")
    assert "continue with resume=True and one of: none left (or start the run again with overwrite_output_dir=True " \
        "and one of: a shorter seq_len)" in said, said
