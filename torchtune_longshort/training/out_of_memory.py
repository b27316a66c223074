"""An out-of-memory error in a training step, told in one line instead of an allocator's traceback: the step, the
device and what it had, the tokens one forward carries, and the settings that lower the step's memory which the run
does not use yet, in the order to try them.

It is a refusal (exit status 2, as bad input is): the config asks for more memory than the device has. On a GPU the
error is ``torch.OutOfMemoryError``; on a CPU, where the kernel usually kills the process first, it is the
``RuntimeError`` of ``DefaultCPUAllocator`` when an allocation is refused (a container's or ``ulimit -v``'s limit).
The recipe stops at its last good step as it does at a bad record: the data position goes back to the step's start,
and the last finished step is saved when it was not, so ``resume=True`` with a lighter setting continues the run.
"""

from __future__ import annotations

import math
import os
import resource
from typing import List, Optional, Tuple

import torch

from torchtune_longshort.devices import free_bytes
from torchtune_longshort.plural import counted
from torchtune_longshort.refusals import Refusal
from torchtune_longshort.training.checkpointing import RESTART

# Rows of the loss's [rows, vocab] buffers per chunk that kept the 1B shape's loss phase below its backward peak on an
# H200 (docs/benchmarks.md, "P6"): loss.num_chunks = ceil((L + e) / LOSS_CHUNK_ROWS).
LOSS_CHUNK_ROWS = 1024
# The tiles suggested for tiled_mlp_tokens, and the fewest rows a forward must carry for tiling to be worth naming.
MLP_TILE_ROWS = 4096
CUDA_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


class OutOfMemory(Refusal, RuntimeError):
    """The step did not fit the device (a refusal: one line, exit status 2)."""


def remedies(config, device: torch.device, num_chunks: int, world_size: int = 1) -> Tuple[List[str], List[str]]:
    """The settings that lower a step's peak memory which ``config`` (a ``RecipeConfig``) does not use yet: those a
    resumed run may change (``loss.num_chunks`` regroups the loss's sums: the same to rounding), and those only a new
    run may (they change what the run trains)."""
    resumable: List[str] = []
    new_run: List[str] = []
    micro = config.batch_size // (world_size * config.gradient_accumulation_steps)
    if not config.enable_activation_checkpointing:
        resumable.append("enable_activation_checkpointing=True")
    elif device.type == "cuda" and not config.enable_activation_offloading:
        resumable.append("enable_activation_offloading=True")
    if config.tiled_mlp_tokens is None and 2 * micro * config.seq_len > 2 * MLP_TILE_ROWS:
        resumable.append(f"tiled_mlp_tokens={MLP_TILE_ROWS}")
    bounded = math.ceil((config.seq_len + config.windows.e_bounds[1]) / LOSS_CHUNK_ROWS)
    if num_chunks < bounded:  # a resume applies it (the loss's sums regrouped: the same to rounding)
        resumable.append(f"loss.num_chunks={bounded}")
    if device.type == "cuda" and "expandable_segments:True" not in os.environ.get(CUDA_ALLOC_CONF, ""):
        resumable.append(f"{CUDA_ALLOC_CONF}=expandable_segments:True in the environment")
    accumulation = 2 * config.gradient_accumulation_steps
    if micro > 1 and config.batch_size % (world_size * accumulation) == 0:
        new_run.append(f"gradient_accumulation_steps={accumulation} (half the sequences per forward, the same batch)")
    new_run.append("a shorter seq_len")
    return resumable, new_run


def _memory(device: torch.device) -> str:
    """What the device had: CUDA's peak allocated of its total, a CPU's free memory now."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return f"peak {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB allocated of {total / 2**30:.1f} GiB"
    free = free_bytes(device)
    told = [] if free is None else [f"{free / 2**30:.1f} GiB free now"]
    cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    if cap != resource.RLIM_INFINITY:
        told.append(f"the process's address space capped at {cap / 2**30:.1f} GiB (ulimit -v)")
    return ", ".join(told)


def describe(what: str, step: int, config, device: torch.device, num_chunks: int,
             world_size: int = 1) -> Tuple[str, List[str], List[str]]:
    """What happened in step ``step`` (1-based; ``what``: the error, on one line), on one line, and
    :func:`remedies`."""
    micro = config.batch_size // (world_size * config.gradient_accumulation_steps)
    memory = _memory(device)
    happened = (f"out of memory in step {step} on {device} (2 windows x {counted(micro, 'sequence')} x seq_len "
                f"{config.seq_len} = {2 * micro * config.seq_len:,} tokens per forward"
                f"{'; ' + memory if memory else ''}): {what[:300]}")
    return (happened, *remedies(config, device, num_chunks, world_size))


def stop_message(happened: str, resumable: List[str], new_run: List[str], finished: int,
                 saved: Optional[str], restart: str = RESTART) -> str:
    """The refusal: what happened, then how to go on from the last saved step (settings a resume may change) or
    from the start (those and the new-run ones); ``restart``: how the run starts again (the recipe's
    ``StepCheckpoints.restart``: a user's file in output_dir named to move out first, which the overwrite the line
    advised alone then refused)."""
    if saved is None:
        done = "No step had finished" if finished == 0 else f"{counted(finished, 'step')} had finished, none saved"
        return (f"{happened}. {done}; {restart} and less memory per step, in this "
                f"order: {'; '.join(resumable + new_run)}")
    fixes = "; ".join(resumable) or "none left"
    return (f"{happened}. The last good step is saved: {saved}; continue with resume=True and one of: {fixes} (or "
            f"{restart} and one of: {'; '.join(new_run)})")
