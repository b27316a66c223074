"""``seq_len`` at the model's ``max_seq_len`` (``training.recipe_config.rules.check_positions``), against torchtune's
own RoPE: a cache built for ``max_seq_len`` positions rotates a window of exactly that many tokens and no more, so
``seq_len == max_seq_len`` is accepted and one more token refused. Hand mutation testing found it unasked: ``L >
max_len`` as ``>=`` passed every other test. Checked with ``local=False`` (nothing on this machine is read)."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torchtune.config._utils import _merge_yaml_and_cli_args
from torchtune.modules import RotaryPositionalEmbeddings

from torchtune_longshort.training.recipe_config import load_recipe_config

BASE = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs/tiny/longshort_stdlib.yaml"))


def _load(overrides):
    return load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), overrides), world_size=1, local=False)


def _rope_takes(max_seq_len: int, tokens: int) -> bool:
    rope = RotaryPositionalEmbeddings(dim=8, max_seq_len=max_seq_len)
    try:
        rope(torch.zeros(1, tokens, 1, 8))
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("max_len", [64, 512])
def test_seq_len_at_max_seq_len_is_accepted_one_more_is_refused(max_len):
    longest = next(n for n in range(max_len - 2, max_len + 3) if not _rope_takes(max_len, n + 1))
    common = [f"model.max_seq_len={max_len}", f"validation.seq_len={longest}"]
    assert _load(common + [f"seq_len={longest}"]).seq_len == longest
    with pytest.raises(ValueError, match=rf"^seq_len={longest + 2} is above the range of the model's RoPE"):
        _load(common + [f"seq_len={longest + 2}"])  # the next even length (L is even)
