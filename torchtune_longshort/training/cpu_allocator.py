"""Keep large freed CPU blocks for reuse (glibc's malloc), so a CPU training step does not page-fault its big
temporaries in again every time.

glibc serves an allocation of 32 MiB or more (less, until its dynamic threshold has grown) with a fresh ``mmap``
and returns it to the kernel with ``munmap`` on free. A CPU training step allocates such blocks many times: the
loss chunk's ``[rows, vocab]`` buffers, dense embedding and output-layer gradients (``zero_grad(set_to_none=True)``
frees them every step), AdamW's per-parameter temporaries. Each new mapping is zero-filled a 4 KiB page at a time
on first touch: at a 32k vocabulary on this project's CPU benchmark shape (dim 256, 4 layers, 1024 tokens a step)
that was about a tenth of the step, half of the optimizer step's time. Raising ``M_MMAP_THRESHOLD`` and
``M_TRIM_THRESHOLD`` keeps those blocks in the heap, as jemalloc or tcmalloc under ``LD_PRELOAD`` would, without a
preload. The process's resident memory then stays at its peak instead of shrinking between steps; its peak is
unchanged.

The recipe calls :func:`reuse_large_cpu_blocks` when it trains on a CPU (config key ``cpu_keep_freed_blocks``,
default true), the ``longshort`` eval model when it loads on a CPU (model arg of the same name, default true) and
``longshort-misalignment`` on a CPU: an 8k-token forward of SmolLM2-135M in the eval model took 2.4M page faults
(4.2 s of system time in a 22.9 s pass) without it, none with it. Elsewhere (macOS, musl, CUDA's own caching
allocator) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30  # 1 GiB: larger blocks (rare) still get their own mapping


@functools.lru_cache(maxsize=1)
def reuse_large_cpu_blocks() -> bool:
    """Tell glibc to serve blocks below 1 GiB from the heap and keep freed memory; True when it took effect."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except (OSError, TypeError):
        return False
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):  # not glibc
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _THRESHOLD))


def keep_freed_blocks_on(device, enabled: bool = True) -> bool:
    """The one rule every entry point follows (the recipe, the eval model, ``longshort-misalignment``): on a CPU
    ``device`` (a ``torch.device`` or its name) and ``enabled``, :func:`reuse_large_cpu_blocks`; True when it took
    effect (the caller logs it with its own way to turn it off)."""
    return enabled and str(device).split(":")[0] == "cpu" and reuse_large_cpu_blocks()


def slow_bf16_note(device, dtype) -> str | None:
    """One line for a bf16 run on a CPU without native bf16 matmuls (no AVX512-BF16 or AMX), else None: there
    torch's bf16 matrix products take a generic path. Measured on this project's AVX2 CPU (AMD EPYC): a 4-step
    SmolLM2-135M run at L 512 took 300 s a step in bf16 and 14 s in fp32."""
    import torch

    if str(device).split(":")[0] != "cpu" or dtype != torch.bfloat16:
        return None
    if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
        return None
    return ("dtype=bf16 on a CPU without native bf16 matrix products (no AVX512-BF16 / AMX): steps run about 20x "
            "slower than dtype=fp32 here")


def cpu_notes(device, dtype, keep_freed_blocks: bool) -> list:
    """The recipe's CPU lines: large freed blocks kept (:func:`keep_freed_blocks_on`, which this applies) and
    :func:`slow_bf16_note`."""
    notes = []
    if keep_freed_blocks_on(device, keep_freed_blocks):
        notes.append("CPU: glibc keeps large freed blocks for reuse (cpu_keep_freed_blocks=False to turn it off)")
    return notes + [n for n in [slow_bf16_note(device, dtype)] if n]
