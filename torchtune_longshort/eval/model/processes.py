"""Data-parallel evaluation: the ``longshort`` model in several processes, as lm-eval's ``hf`` runs under
``accelerate launch``.

``torchrun --nproc_per_node N -m torchtune_longshort.eval run --model longshort ...`` (or ``accelerate launch``,
which sets the same environment) starts N copies of the evaluation. Each loads the model on its own device (a CUDA
device becomes ``cuda:<LOCAL_RANK>``); lm-eval gives each process every N-th document of each task (the
model's ``rank`` and ``world_size``), pads the request counts, and gathers the per-document values on rank 0
through the model's ``all_gather``, ``gather_object`` and ``barrier`` (lm-eval's LM API), implemented here over
``torch.distributed`` (NCCL on GPUs, gloo on CPUs). Rank 0 alone writes the results.
"""

from __future__ import annotations

import atexit
import os
from typing import Any, List, Optional

import torch


def launched_world_size() -> int:
    """The number of processes a launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def process_device(device: torch.device) -> torch.device:
    """One GPU per process under a launcher: a CUDA device becomes ``cuda:<LOCAL_RANK>`` (as lm-eval's ``hf`` takes
    accelerate's device there, whatever index was given: lm-eval's own default is ``cuda:0`` for every process);
    anything else stays."""
    if launched_world_size() > 1 and device.type == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


class Processes:
    """This process's place among the evaluation's processes and the collectives lm-eval asks the model for."""

    def __init__(self, device: torch.device) -> None:
        self.rank, self.world_size, self.device = 0, launched_world_size(), device
        if self.world_size == 1:
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            atexit.register(_leave)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` (flattened), concatenated in rank order (accelerate's ``gather``)."""
        if self.world_size == 1:
            return tensor
        import torch.distributed as dist

        flat = tensor.reshape(-1).to(self.device)
        out = [torch.empty_like(flat) for _ in range(self.world_size)]
        dist.all_gather(out, flat)
        return torch.cat(out)

    def gather_object(self, obj: Any, dst: int = 0) -> Optional[List[Any]]:
        """Every rank's ``obj`` in rank order on ``dst``; None on the other ranks."""
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out: Optional[List[Any]] = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, out, dst=dst)
        return out

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
