"""The generation's host-counted KV cache (``eval/model/kv_cache.py``) against torchtune's own ``KVCache``: the same
updates and resets leave the same keys, values, positions and size, a cache filled to its last position is accepted
by both, and one position more is refused by both. (Generation never fills its cache to the end, so its tests could
not tell ``<=`` from ``<`` here, nor a reset that forgot the filled count until a LongRoPE re-prefill.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchtune.modules.kv_cache import KVCache

from torchtune_longshort.eval.model.kv_cache import HostCountedKVCache, count_on_host

B, H, S, D = 2, 3, 8, 4


def _pair():
    ref = KVCache(B, S, H, D, torch.float32)
    ours = nn.ModuleList([KVCache(B, S, H, D, torch.float32)])
    assert count_on_host(ours) == 1 and type(ours[0]) is HostCountedKVCache
    return ref, ours[0]


def _same(ref: KVCache, ours: HostCountedKVCache) -> None:
    assert ours.size == ref.size
    assert torch.equal(ours.cache_pos, ref.cache_pos)
    assert torch.equal(ours.k_cache, ref.k_cache) and torch.equal(ours.v_cache, ref.v_cache)


def _kv(seq_len: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, seq_len, D, generator=g), torch.randn(B, H, seq_len, D, generator=g)


def test_updates_and_resets_match_torchtune_up_to_a_full_cache():
    ref, ours = _pair()
    for rounds in range(2):  # the second round runs after a reset (LongRoPE's re-prefill)
        for step, seq_len in enumerate((5, 2, 1)):  # 5 + 2 + 1 = S: the last update fills the last position
            k, v = _kv(seq_len, 10 * rounds + step)
            ref.update(k, v)
            ours.update(k, v)
            _same(ref, ours)
        assert ref.size == S
        k, v = _kv(1, 99)
        with pytest.raises(AssertionError):
            ref.update(k, v)
        with pytest.raises(AssertionError):
            ours.update(k, v)
        ref.reset()
        ours.reset()
        _same(ref, ours)
        assert ref.size == 0
