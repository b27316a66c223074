"""torchtune's profiler in the long-short recipe, as torchtune's recipes run it.

Built from the config's ``profiler`` node with ``torchtune.training.setup_torch_profiler`` (its activities, trace
options and ``torch.profiler.schedule``; its ``trace_handler`` writes each cycle's ``iteration_<k>/``, ``k`` the
run's optimizer step the cycle ends at (torchtune counts from the process's start: a resumed run wrote into the first
run's folders): the chrome / TensorBoard trace (``r<rank>-<date>.<ns>.pt.trace.json.gz``: torchtune names every
rank's ``r0-``; here each rank's carries its own rank), ``rank<r>_key_averages.txt``, stacks and memory files when
asked); the schedule counts from the process's first step, as torchtune's recipes step it; started
before the first step, stepped after each optimizer step (a step holds all its micro-batches), stopped after the
last. With ``profile_memory`` on a CUDA device the CUDA memory history is recorded over the first cycle's active
steps, as torchtune's recipes do, so that the trace handler's snapshot holds them. Disabled (or no ``profiler``
node): no-ops, nothing written.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

import torch
from omegaconf import OmegaConf
from torchtune import config as tt_config
from torchtune import utils as tt_utils

from torchtune_longshort.plural import counted
from torchtune_longshort.training.recipe_config.profiler import ProfilerConfig


class StepProfiler:
    """``start()`` / ``step()`` / ``stop()`` around the training loop (no-ops when ``section`` is None or off)."""

    def __init__(self, section: Optional[ProfilerConfig], trace_dir: Optional[str], device: torch.device,
                 steps_to_run: int, say: Callable[[str], None], first_step: int = 0) -> None:
        """``first_step``: the optimizer steps done before this process (a resumed run's step)."""
        self.profiler = None
        self.done = 0  # optimizer steps stepped through in this process
        if section is None or not section.enabled or trace_dir is None:
            return
        node = {"_component_": section.component, **section.args, "output_dir": trace_dir}
        # an activity this machine lacks is left out (torch warns and drops CUDA; XPU it may not): CPU runs trace CPU
        node["cuda"] = bool(node.get("cuda", True)) and torch.cuda.is_available()
        node["xpu"] = bool(node.get("xpu", True)) and hasattr(torch, "xpu") and torch.xpu.is_available()
        self.profiler, _ = tt_config.instantiate(OmegaConf.create(node))
        _, rank = tt_utils.get_world_size_and_rank()
        if self.profiler.on_trace_ready is not None:
            self.profiler.on_trace_ready = _named_for_run(self.profiler.on_trace_ready, rank, first_step)
        schedule = section.schedule()
        self._record_from = schedule["wait_steps"] + schedule["warmup_steps"]
        self._record_to = self._record_from + schedule["active_steps"]
        self._memory = bool(section.profile_memory) and device.type == "cuda"
        say(f"Profiler: traces of optimizer steps {first_step + self._record_from + 1}..{first_step + self._record_to}"
            f" ({schedule}, counted from this process's first step, {first_step + 1}) go to {trace_dir}")
        if steps_to_run <= self._record_from:  # a resumed run with few steps left (a new one is refused earlier)
            say(f"Profiler: this process trains {counted(steps_to_run, 'step')}, and the first traced one is step "
                f"{first_step + self._record_from + 1}: no trace will be written; lower profiler.wait_steps / "
                "warmup_steps")

    def start(self) -> None:
        if self.profiler is None:
            return
        self.profiler.start()
        self._memory_history()

    def step(self) -> None:
        """After an optimizer step."""
        if self.profiler is None:
            return
        self.profiler.step()  # the trace handler runs here when a cycle's active steps are done
        self.done += 1
        self._memory_history()

    def stop(self) -> None:
        if self.profiler is None:
            return
        self.profiler.stop()
        if self._memory and self._record_from <= self.done < self._record_to:
            torch.cuda.memory._record_memory_history(enabled=None)
        self.profiler = None

    def _memory_history(self) -> None:
        if not self._memory:
            return
        if self.done == self._record_from:
            torch.cuda.memory._record_memory_history()
        elif self.done == self._record_to:
            torch.cuda.memory._record_memory_history(enabled=None)


def _named_for_run(handler: Callable, rank: int, first_step: int) -> Callable:
    """``handler`` (torchtune's ``trace_handler``), writing into ``iteration_<first_step + k>/`` and exporting its
    chrome trace named for ``rank``. torchtune 0.6.1 names the folder by the profiler's step count, which starts at 0
    in every process (a run resumed at step 2 traced its step 3 into the first run's ``iteration_1/``, replacing its
    ``rank<r>_key_averages.txt``), and names every rank's ``r0-<date>.<ns>.pt.trace.json.gz`` (its other files are
    ``rank<r>_...``), so under torchrun the ranks' traces sat side by side under rank 0's name."""
    def on_trace_ready(prof) -> None:
        export = prof.export_chrome_trace

        def export_as_rank(path: str, *args, **kwargs):
            folder, name = os.path.split(path)
            if name.startswith("r0-"):
                name = f"r{rank}-{name[len('r0-'):]}"
            return export(os.path.join(folder, name), *args, **kwargs)

        prof.export_chrome_trace = export_as_rank
        prof.step_num += first_step  # the handler names the folder by it; restored before the schedule reads it
        try:
            handler(prof)
        finally:
            prof.step_num -= first_step
            del prof.export_chrome_trace  # the class's method again
    return on_trace_ready
