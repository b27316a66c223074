"""The one device rule of every entry point (the recipe, ``longshort-eval`` with any model, ``longshort-misalignment``):
a device that was asked for and that this machine does not have is refused before any work, in one line naming the
field and the fix. Nothing falls back to another device, so what a results file says it ran on (lm-eval's
``config.device``, the provenance block's ``device``) is where it ran.

:func:`require_device` checks a name; :func:`default_device` is the device used when none is asked for;
:func:`check_fits` refuses, before the allocation, a table that this machine's free memory cannot hold.
:func:`rng_states` / :func:`set_rng_states`: torch's global generators a training step draws from, for exact resumes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

import psutil
import torch

from torchtune_longshort.plural import counted

T = TypeVar("T")

ACCEPTED = "cpu, cuda, cuda:N, mps or mps:N"
_NAME = re.compile(r"(cpu|mps|cuda)(:\d+)?")  # matched whole (fullmatch): a name with a newline after it is none


def default_device() -> str:
    """``cuda`` when this machine has a CUDA device, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def is_device_name(name: Any) -> bool:
    """``name`` is a device name this package takes (:data:`ACCEPTED`), whether or not this machine has it."""
    m = _NAME.fullmatch(str(name))
    return bool(m) and not (m.group(1) == "cpu" and m.group(2))


def device_problem(name: str) -> Union[str, None]:
    """Why this machine cannot run on ``name`` (None: it can)."""
    if not is_device_name(name):
        return f"not a device name (accepted: {ACCEPTED})"
    m = _NAME.fullmatch(str(name))
    kind, index = m.group(1), int(m.group(2)[1:]) if m.group(2) else None
    if kind == "cuda":
        if not torch.cuda.is_available():
            return "CUDA is not available on this machine"
        if index is not None and index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            return f"this machine has {counted(count, 'CUDA device')} (cuda:0..cuda:{count - 1})"
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        return "MPS is not available on this machine"
    return None


def cpu_oversubscribed(device: Union[str, torch.device], processes: int) -> Optional[str]:
    """One line when ``processes`` training processes on a CPU ``device`` outnumber this machine's cores
    (``os.cpu_count()``): each gets less than one, and the run is slower than in fewer processes. None otherwise (a
    GPU run, or one that fits)."""
    cores = os.cpu_count()
    if str(device).split(":")[0] != "cpu" or cores is None or processes <= cores:
        return None
    return (f"{processes} processes on device=cpu, and this machine has {counted(cores, 'CPU core')}: each process "
            f"gets less than one core, so steps run slower than with fewer processes; use --nproc_per_node {cores} or "
            "fewer")


CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")  # v2, v1


def _cgroup_limit() -> Optional[int]:
    """This process's container memory limit (cgroup v2 or v1), None without one: a container's processes are
    killed at its limit, while the host's available memory (what psutil reports) may be far larger."""
    for path in CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max" / 2**63 - page: no limit
            return int(text)
    return None


def free_bytes(device: Union[str, torch.device]) -> Optional[int]:
    """Bytes still free on ``device``: for a CPU the host's available memory, at most the container's limit; for a
    CUDA device its free memory; None where it is not known (``meta``, ``mps``)."""
    device = torch.device(device)
    if device.type == "cpu":
        available, limit = int(psutil.virtual_memory().available), _cgroup_limit()
        return available if limit is None else min(available, limit)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(device)[0])
    return None


def check_fits(nbytes: int, device: Union[str, torch.device], what: str, fix: str) -> None:
    """``ValueError`` naming ``what``, its size, the free memory and ``fix`` when ``nbytes`` is more than ``device``
    has free: asked for before the allocation, an absurd length is refused in one line instead of the process being
    killed for memory (and others on the machine with it)."""
    free = free_bytes(device)
    if free is not None and nbytes > free:
        raise ValueError(f"{what} takes about {nbytes / 2**30:,.1f} GiB, more than the {free / 2**30:.1f} GiB free on "
                         f"{torch.device(device)}; {fix}")


CPU_ALLOCATOR_FAILURES = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation the device refused: CUDA's ``OutOfMemoryError``, the CPU allocator's
    ``RuntimeError`` (a container's or ``ulimit -v``'s limit; the kernel usually kills the process first), or
    Python's ``MemoryError``."""
    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(err, RuntimeError) and any(m in str(err) for m in CPU_ALLOCATOR_FAILURES)


def out_of_memory_text(err: BaseException) -> str:
    """The error on one line, from ``DefaultCPUAllocator`` on (its ``[enforce fail at ...]`` prefix names a C++
    source line, not the allocation)."""
    text = " ".join(str(err).split())
    start = text.find("DefaultCPUAllocator")
    return text[start:] if start >= 0 else text


def out_of_memory_in(run: Callable[[], T]) -> Tuple[Optional[T], Optional[str]]:
    """``(run(), None)``, or ``(None, the error on one line)`` when ``run`` ran out of memory (any other error is
    raised). Returned past the ``except`` clause: the tensors the failed call's frames held are freed by then, before
    the caller runs anything again."""
    try:
        return run(), None
    except (RuntimeError, MemoryError) as err:
        if not is_out_of_memory(err):
            raise
        return None, out_of_memory_text(err)


def release_cached(device: Union[str, torch.device]) -> None:
    """Hand the caching allocator's free blocks back to ``device`` (after an out-of-memory error)."""
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def require_device(name: str, field: str = "device", fix: Optional[str] = None) -> torch.device:
    """The ``torch.device`` named ``name``; ``ValueError`` naming ``field``, the value, the reason and the fix (by
    default ``field`` set to cpu) when this machine does not have it (no fallback: a run on another device than the
    one asked for would be recorded as run where it was not)."""
    problem = device_problem(name)
    if problem is not None:
        if fix is None:  # --device cpu, --model_args device=cpu
            fix = f"{field} cpu" if field.startswith("-") and " " not in field else f"{field}=cpu"
        raise ValueError(f"{field}={str(name)!r}: {problem}; pass {fix}, or run where that device exists")
    return torch.device(str(name))


def rng_states() -> Dict[str, Any]:
    """torch's global random states a step draws from: the CPU's (``torch_rng``) and, once CUDA has started, the
    current CUDA device's (``cuda_rng``: dropout and LoRA dropout on a GPU draw from it, not from the CPU's)."""
    states: Dict[str, Any] = {"torch_rng": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda_rng"] = torch.cuda.get_rng_state()
    return states


def rank_rng_states(distributed: bool) -> Optional[List[Dict[str, Any]]]:
    """Every rank's :func:`rng_states`, in rank order (a collective: every rank calls it); None in one process.
    Dropout (LoRA's included) draws from each rank's own stream, so an exact resume puts back each rank's."""
    if not distributed:
        return None
    import torch.distributed as dist

    out: List[Optional[Dict[str, Any]]] = [None] * dist.get_world_size()
    dist.all_gather_object(out, rng_states())
    return out


def set_rank_rng_states(states: Dict[str, Any], rank: int, world_size: int) -> None:
    """Put back this rank's random states from a recipe state: its own (``rank_rngs``, saved by a run of the same
    process count), else the one saved (rank 0's, or a one-process run's)."""
    ranks = states.get("rank_rngs")
    set_rng_states(ranks[rank] if isinstance(ranks, list) and len(ranks) == world_size else states)


def set_rng_states(states: Dict[str, Any]) -> None:
    """Put back what :func:`rng_states` took (a state saved without ``cuda_rng``, or read where there is no CUDA,
    leaves the CUDA generator as it is)."""
    torch.set_rng_state(states["torch_rng"])
    if states.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda_rng"])
