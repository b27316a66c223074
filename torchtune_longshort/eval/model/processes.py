"""Data-parallel evaluation: the ``longshort`` model in several processes, as lm-eval's ``hf`` runs under
``accelerate launch``.

``torchrun --nproc_per_node N -m torchtune_longshort.eval run --model longshort ...`` (or ``accelerate launch``,
which sets the same environment) starts N copies of the evaluation. Each loads the model on its own device (a CUDA
device becomes ``cuda:<LOCAL_RANK>``); lm-eval gives each process every N-th document of each task (the
model's ``rank`` and ``world_size``), pads the request counts, and gathers the per-document values on rank 0
through the model's ``all_gather``, ``gather_object`` and ``barrier`` (lm-eval's LM API), implemented here over
``torch.distributed`` (NCCL on GPUs, gloo on CPUs). Rank 0 alone writes the results.

The pack's tasks report a metric per length (``ppl_128``, ``ppl_256``), and every N-th document of a task whose
documents take their lengths in turn can all be of one length: 2 processes and 2 lengths gave rank 0 every 128-token
sequence and rank 1 every 256-token one. lm-eval 0.4.13 gathers the values of the metrics rank 0 scored, looked up in
every rank's (``KeyError: ('ppl_128', 'none')`` after every request had run, no results file); a metric rank 0 had
not scored would have been left out. :func:`complete_metric_keys` gives every rank's values, and rank 0's, the
metrics any rank scored (an empty list where a rank scored none).
"""

from __future__ import annotations

import atexit
import logging
from collections import Counter
from types import FrameType
from typing import Any, Dict, List, Optional

import torch

from torchtune_longshort.launcher import launched_local_rank, launched_rank, launched_world_size

logger = logging.getLogger(__name__)


def process_device(device: torch.device) -> torch.device:
    """One GPU per process under a launcher: a CUDA device becomes ``cuda:<LOCAL_RANK>`` (as lm-eval's ``hf`` takes
    accelerate's device there, whatever index was given: lm-eval's own default is ``cuda:0`` for every process);
    anything else stays."""
    if launched_world_size() > 1 and device.type == "cuda":
        return torch.device("cuda", launched_local_rank())
    return device


class Processes:
    """This process's place among the evaluation's processes and the collectives lm-eval asks the model for."""

    def __init__(self, device: torch.device) -> None:
        self.rank, self.world_size, self.device = 0, launched_world_size(), device
        if self.world_size == 1:
            return
        import torch.distributed as dist

        launched_rank()  # a RANK no launcher sets is refused naming it, not in torch's rendezvous
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

    def gather_object(self, obj: Any, dst: int = 0, caller: Optional[FrameType] = None) -> Optional[List[Any]]:
        """Every rank's ``obj`` in rank order on ``dst``; None on the other ranks. lm-eval's metric values are
        completed (:func:`complete_metric_keys`; ``caller``: the frame of lm-eval's ``evaluate``)."""
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out: Optional[List[Any]] = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, out, dst=dst)
        if _metric_values([obj]):  # every rank gathers the same kind of object at the same call
            self._sum_not_scored(dst, caller)
        complete_metric_keys(out, caller)
        return out

    def _sum_not_scored(self, dst: int, caller: Optional[FrameType]) -> None:
        """Give ``dst``'s tasks every rank's per-process counts (a task's ``SUMMED_OVER_PROCESSES`` attributes: the
        pack's ``PackTask`` counts the samples it did not score, each process its own documents; the results file,
        written by rank 0, counted rank 0's alone). A collective: every rank calls it."""
        import torch.distributed as dist

        tasks = {name: acc.get("task") for name, acc in _accumulated(caller).items()}
        mine = {name: {k: dict(getattr(t, k)) for k in getattr(t, "SUMMED_OVER_PROCESSES", ())}
                for name, t in tasks.items()}
        out: Optional[List[Any]] = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(mine, out, dst=dst)
        for name, t in tasks.items() if out is not None else ():
            for k in mine[name]:
                setattr(t, k, dict(sum((Counter(ranks[name][k]) for ranks in out), Counter())))

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()


def _metric_values(gathered: Optional[List[Any]]) -> bool:
    """Whether ``gathered`` is lm-eval's per-task metric values of every rank (``{task: {(metric, filter):
    [values]}}``), not its logged samples (``{task: [rows]}``)."""
    return bool(gathered) and all(
        isinstance(ranks, dict) and all(isinstance(v, dict) and all(isinstance(k, tuple) for k in v)
                                        for v in ranks.values()) for ranks in gathered)


def complete_metric_keys(gathered: Optional[List[Any]], caller: Optional[FrameType]) -> None:
    """Give each rank's metric values in ``gathered`` (:func:`_metric_values`; anything else is left alone) every
    metric some rank scored, and rank 0's own values (``eval_results_acc`` of lm-eval's ``evaluate``, the
    ``caller`` frame, which lm-eval gathers by its keys) as well: an empty list where a process scored none."""
    if not _metric_values(gathered):
        return
    every: Dict[str, list] = {}
    for ranks in gathered:  # type: ignore[union-attr]
        for task, values in ranks.items():
            every.setdefault(task, [])
            every[task] += [k for k in values if k not in every[task]]
    for ranks in gathered:  # type: ignore[union-attr]
        for task, keys in every.items():
            values = ranks.setdefault(task, {})
            for key in keys:
                values.setdefault(key, [])
    accumulated = _accumulated(caller)
    for task, keys in every.items():
        raw = accumulated.get(task, {}).get("raw_metrics")
        if raw is None:
            logger.warning("%s: the metrics rank 0 did not score cannot be added to lm-eval's results (%s)", task,
                           "its evaluate() has no eval_results_acc")
            continue
        add_metric = getattr(accumulated[task].get("task"), "add_metric", None)  # the pack's PackTask
        for key in keys:
            raw.setdefault(key, [])
            if add_metric is not None:
                add_metric(key[0])


def _accumulated(caller: Optional[FrameType]) -> Dict[str, Any]:
    """lm-eval's ``evaluate``'s per-task accumulator (``eval_results_acc``: ``{task: {"task": <Task>,
    "raw_metrics": ...}}``) in the ``caller`` frame; empty where there is none."""
    return (caller.f_locals.get("eval_results_acc") if caller is not None else None) or {}


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
