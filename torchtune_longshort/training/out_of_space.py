"""A full disk, before and during a run: the room a run's checkpoints take, checked when it starts, and the one line it
ends with when a write finds no room anyway (another process filled the disk, a quota).

At setup (:func:`check_checkpoint_room`) the built model gives a lower bound of one checkpoint: its weights in the
dtype they are saved in (:func:`weight_bytes`) and the optimizer's state (:func:`state_bytes`). A run whose first
write cannot fit is refused before it writes; a run whose checkpoints all together will not fit is told so in one
line (:func:`forecast`, :class:`CheckpointPlan`), with the step where the disk fills, and goes on (its user may make
room as it trains); the first save's real size says it again when it moves that step.

During the run a save that finds no room removes what it staged (that frees what it took), and the run ends in one
line (exit status 2): the step, the disk's room, the checkpoint's size, and which checkpoint stands for
``resume=True``. The folders of ``step_<k>`` are complete or absent whatever the failure
(:mod:`~torchtune_longshort.training.checkpointing`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
from torchtune.config import instantiate

from torchtune_longshort.disk_space import (
    NO_ROOM, check_room, no_room, reason, room, room_text, room_then, size_text,
)
from torchtune_longshort.models.peft_adapter import is_adapter_key, lora_modules
from torchtune_longshort.plural import counted
from torchtune_longshort.refusals import Refusal
from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path, saves_at

_PROBE_VALUES = 256  # a stand-in parameter as large as a quantized optimizer's block (torchao's AdamW8bit)


class OutOfSpace(Refusal, RuntimeError):
    """A write of the run found its disk full (a refusal: one line, exit status 2)."""


def saved_tensors(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """What ``model.state_dict()`` holds, by name, without its hooks (a QLoRA model's would dequantize every weight,
    on a meta device not at all): the parameters (a tied one once, as it is saved) and the persistent buffers."""
    out = dict(model.named_parameters())
    for prefix, module in model.named_modules():
        for name, buffer in module._buffers.items():
            if buffer is not None and name not in module._non_persistent_buffers_set:
                out[f"{prefix}.{name}" if prefix else name] = buffer
    return out


def weight_bytes(model: torch.nn.Module, dtype: torch.dtype, lora: bool) -> int:
    """Bytes of the weights one ``step_<k>`` folder holds for ``model`` (its parameters may be on ``meta``): every
    state-dict entry but the adapters in ``dtype``; a LoRA run's adapted weights merged in float32, and its PEFT
    ``adapter/``: the trainable weights as they are."""
    sd = saved_tensors(model)
    adapted = {f"{m}.weight" for m in lora_modules(sd)} if lora else set()
    size = torch.tensor([], dtype=dtype).element_size()
    total = 0
    for key, value in sd.items():
        if is_adapter_key(key):
            continue
        total += value.numel() * (4 if key in adapted else size)
    if lora:
        total += sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return total


def state_bytes(model: torch.nn.Module, optimizer_node, dtype: torch.dtype) -> int:
    """Bytes of the optimizer's state for ``model``'s trainable parameters: the per-value state of the config's
    optimizer (``optimizer_node``) measured by one step on a stand-in parameter of ``dtype`` (AdamW: two values; SGD
    without momentum: none); 0 when the optimizer does not build on a CPU stand-in (a lower bound still)."""
    probe = torch.nn.Parameter(torch.zeros(_PROBE_VALUES, dtype=dtype))
    probe.grad = torch.ones_like(probe)
    try:
        optimizer = instantiate(optimizer_node, [probe])
        optimizer.step()
    except Exception:  # a CUDA-only option (fused=True), an optimizer that wants more than a stand-in
        return 0
    per_value = sum(t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values()
                    if torch.is_tensor(t) and t.numel() == probe.numel()) / probe.numel()
    return int(per_value * sum(p.numel() for p in model.parameters() if p.requires_grad))


def save_steps(start: int, stop_at: int, max_steps: int, save_every: Optional[int]) -> List[int]:
    """The steps after ``start`` that this process saves
    (:func:`~torchtune_longshort.training.checkpointing.saves_at`)."""
    return [k for k in range(start + 1, stop_at + 1) if saves_at(k, stop_at, max_steps, save_every)]


@dataclass(frozen=True)
class CheckpointPlan:
    """The saves a run makes: each a step folder of ``weights`` bytes, kept, and ``state`` bytes in
    ``recipe_state/``, of which the newest ``keep`` stay after each save (the older ones are deleted once the new one
    is in place, so each save needs room for both); ``existing_states``: those already there (a resumed run's);
    ``first_extra``: a ``step_0`` written before the first save (from scratch), else 0; ``steps``: the steps saved."""

    weights: int
    state: int
    keep: int
    existing_states: int
    first_extra: int
    steps: List[int]

    def held_after(self, saves: int) -> int:
        """Bytes the run's checkpoints have added after ``saves`` saves."""
        kept = min(self.existing_states + saves, self.keep) if saves else self.existing_states  # pruned to keep
        return self.first_extra + saves * self.weights + (kept - self.existing_states) * self.state

    def fills_at(self, free: int) -> Optional[int]:
        """The step whose save finds no room in ``free`` bytes (None: they all fit)."""
        for j, step in enumerate(self.steps):
            if self.held_after(j) + self.weights + self.state > free:
                return step
        return None


def check_checkpoint_room(output_dir: Path, plan: CheckpointPlan, reclaimed: int) -> Optional[int]:
    """Refuse a run whose first write cannot fit ``output_dir``'s disk, with ``reclaimed`` bytes more (an earlier run
    ``overwrite_output_dir`` deletes at the first write); the step whose save will not fit (None: all fit)."""
    if not plan.steps:
        return None
    check_room(output_dir, plan.first_extra + plan.weights + plan.state - reclaimed,
               f"{'the start weights (step_0) with ' if plan.first_extra else ''}the first checkpoint "
               f"(step {plan.steps[0]}){', less the earlier run overwrite_output_dir deletes,' if reclaimed else ''}",
               "free space there, or set output_dir to a disk with room")
    return plan.fills_at(room(output_dir)[0] + reclaimed)


def forecast(output_dir: Path, plan: CheckpointPlan, step: int, measured: bool, reclaimed: int = 0) -> str:
    """The line that says at which save (``step``) the disk fills, for the saves of ``plan``."""
    n = len(plan.steps)
    return (f"output_dir {output_dir} has {room_text(output_dir)}"
            f"{f' (and {size_text(reclaimed)} in the earlier run it replaces)' if reclaimed else ''}; the "
            f"{counted(n, 'checkpoint')} this run still saves take{'s' if n == 1 else ''} "
            f"{'' if measured else 'at least '}"
            f"{size_text(plan.held_after(n))} ({size_text(plan.weights)} of weights each, and {size_text(plan.state)} "
            f"of optimizer state in each of the keep_recipe_states={plan.keep} newest"
            f"{', as the last one measured' if measured else ''}): the disk fills at the save of step {step} unless "
            "room is made (save_every_n_steps sets how often it saves)")


def measured_plan(saved: Path, ckpts: StepCheckpoints, steps: List[int]) -> CheckpointPlan:
    """The plan of the saves ``steps`` still to come, sized by the checkpoint just ``saved``."""
    return CheckpointPlan(tree_bytes(saved), _state_size(saved), ckpts.keep,
                          len(ckpts.states()), 0, steps)


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (symbolic links not followed: deleting one frees nothing of its target)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(folder, name))
                total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def folder_bytes(path: Path) -> int:
    """Bytes of a step folder and its recipe state."""
    return tree_bytes(path) + _state_size(path)


def saved(step_dir: Path) -> Tuple[int, str]:
    """What a save wrote: the bytes of the step folder and its resume state (:func:`folder_bytes`), and the log line's
    words for them, the two named apart (``recipe_state/``: AdamW's two moments, about twice the weights' bytes), so
    that the folder's own size is what the line says. One walk of the folder."""
    weights, state = tree_bytes(step_dir), recipe_state_path(step_dir)
    if not state.is_file():
        return weights, size_text(weights)
    extra = state.stat().st_size
    text = f"{size_text(weights)}; its resume state {state.parent.name}/{state.name} {size_text(extra)}"
    return weights + extra, text


def _state_size(step_dir: Path) -> int:
    state = recipe_state_path(step_dir)
    return state.stat().st_size if state.is_file() else 0


def stop_message(writing: str, step: int, ckpts: StepCheckpoints, per_checkpoint: Optional[int], measured: bool,
                 error: BaseException, through: Optional[int] = None) -> str:
    """The run's last line after ``writing`` found no room at ``step``: the disk's room, a checkpoint's size
    (``measured`` from the last one saved, else the estimate of the run's start), and the checkpoint ``resume=True``
    continues from. The room is the one :func:`~torchtune_longshort.disk_space.note_room` kept on ``error`` when the
    write failed (before its cleanup freed what it staged), else measured now. The step folders it counts as room to
    make are the run's own (:meth:`~.checkpointing.StepCheckpoints.run_steps` through ``through``, its
    ``max_steps``): a user's ``step_9/`` beside a run of 8 steps was counted, as if to delete."""
    latest = ckpts.latest(resumable=True)
    size = (f"; a checkpoint of this run takes {'' if measured else 'at least '}{size_text(per_checkpoint)}"
            if per_checkpoint else "")
    older = [p for k in ckpts.run_steps(through, listed=True) if (p := ckpts.path(k)) != latest and k > 0]
    held = (f" (the {counted(len(older), 'step folder')} besides {latest.name} hold{'s' if len(older) == 1 else ''} "
            f"{size_text(sum(map(folder_bytes, older)))})"
            if older and latest is not None else "")
    head, fix = no_room(error)
    make = f"make room{held}" if (head, fix) == NO_ROOM else fix
    stands = (f"the last complete checkpoint {latest} stands: {make}, then continue with resume=True"
              if latest is not None else
              f"no checkpoint of this run can be resumed: {make}, then {ckpts.restart()}")
    have = room_then(error, ckpts.root, "the write failed")
    other = "; or set output_dir to a disk with room" if (head, fix) == NO_ROOM else ""
    return f"{head} writing {writing} after step {step} ({have}{size}): {reason(error)}; {stands}{other}"
