"""torchtune's KV cache with its fill counted on the host, for :mod:`~torchtune_longshort.eval.model.generation`.

torchtune 0.6.1's ``KVCache.update`` checks ``cache_pos[0] + seq_len <= max_seq_len`` with a device value, and
``reset`` subtracts ``cache_pos[0].item()``: on a GPU each is a host-device sync, one per layer per generated token.
The generation loop knows how many positions it has written; so does this cache, on the host: the same check, the
same writes and the same ``cache_pos`` (kept for anything that reads it), no device read.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import nn
from torchtune.modules.kv_cache import KVCache

__all__ = ["HostCountedKVCache", "count_on_host"]


class HostCountedKVCache(KVCache):
    """``KVCache`` whose filled length (:attr:`size`) is a Python int: update and reset read no device value."""

    filled = 0

    def update(self, k_val: torch.Tensor, v_val: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """As ``KVCache.update``: write ``[B, H, S, D]`` keys and values at the next ``S`` positions."""
        bsz, _, seq_len, _ = k_val.shape
        if bsz > self.k_cache.shape[0]:
            raise ValueError(f"The current cache has been setup with a batch size of {self.k_cache.shape[0]}, but "
                             f"found new key tensors with batch size {bsz}!")
        if self.filled + seq_len > self.k_cache.shape[2]:
            raise AssertionError(f"KV cache of {self.k_cache.shape[2]} positions holds {self.filled}: no room for "
                                 f"{seq_len} more")
        self.k_cache[:, :, self.cache_pos[:seq_len]] = k_val
        self.v_cache[:, :, self.cache_pos[:seq_len]] = v_val
        self.cache_pos.add_(seq_len)
        self.filled += seq_len
        return self.k_cache, self.v_cache

    def reset(self) -> None:
        """Empty the cache (zeros, positions from 0)."""
        self.k_cache.zero_()
        self.v_cache.zero_()
        self.cache_pos -= self.filled
        self.filled = 0

    @property
    def size(self) -> int:
        return self.filled


def count_on_host(model: nn.Module) -> int:
    """Turn every freshly set-up (empty) torchtune ``KVCache`` of ``model`` into a :class:`HostCountedKVCache`; the
    number turned."""
    turned = 0
    for module in model.modules():
        if type(module) is KVCache:
            module.__class__ = HostCountedKVCache
            module.filled = 0
            turned += 1
    return turned
