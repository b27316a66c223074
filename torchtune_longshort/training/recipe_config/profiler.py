"""The ``profiler`` section: torchtune's ``torchtune.training.setup_torch_profiler`` node, the one every torchtune
recipe reads, with its keys and its defaults (read from its signature), checked before anything is built.

The recipe steps the profiler once per optimizer step, as torchtune's recipes do
(:mod:`torchtune_longshort.training.profiling`). One difference, on purpose: without ``profiler.output_dir`` the
traces go to ``<output_dir>/profiling_outputs`` (the value torchtune's shipped configs give), not to a
``profiler_output`` folder in the working directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from torchtune_longshort.config.fields import FROM_COMPONENT, ComponentSection, setting
from torchtune_longshort.config.values import boolean, integer, text

PROFILER = "torchtune.training.setup_torch_profiler"
TRACE_FOLDER = "profiling_outputs"  # under output_dir when profiler.output_dir is not given


@dataclass(frozen=True)
class ProfilerConfig(ComponentSection):
    """``profiler``: torch.profiler over the training steps, traces written per profiling cycle."""

    DOC_COMPONENT: ClassVar[str] = PROFILER  # whose defaults the README shows
    # `profiler.enabled=True` over a config without the node: torchtune's recipes fill in setup_torch_profiler (this
    # recipe refused it as "profiler._component_ is missing")
    DEFAULT_COMPONENT: ClassVar[str] = PROFILER
    enabled: bool = setting(FROM_COMPONENT, doc="profile (false: nothing is set up or written)", check=boolean)
    output_dir: Optional[str] = setting(None, doc="trace folder (null: output_dir/profiling_outputs)", check=text)
    cpu: bool = setting(FROM_COMPONENT, doc="trace CPU activity", check=boolean)
    cuda: bool = setting(FROM_COMPONENT, doc="trace CUDA activity (left out where there is no CUDA)",
                         check=boolean)
    xpu: bool = setting(FROM_COMPONENT, doc="trace XPU activity (left out where there is no XPU)",
                        check=boolean)
    profile_memory: bool = setting(FROM_COMPONENT, doc="memory (turns with_stack and record_shapes on; CUDA: the "
                                   "memory snapshot of the active steps)", check=boolean)
    with_stack: bool = setting(FROM_COMPONENT, doc="record stacks (rank<r>_stacks.txt)", check=boolean)
    record_shapes: bool = setting(FROM_COMPONENT, doc="record input shapes", check=boolean)
    with_flops: bool = setting(FROM_COMPONENT, doc="estimate FLOPs", check=boolean)
    wait_steps: Optional[int] = setting(FROM_COMPONENT, doc="optimizer steps skipped first in a cycle (null: 5)",
                                        check=integer(0))
    warmup_steps: Optional[int] = setting(FROM_COMPONENT, doc="then steps traced but not kept (null: 5)",
                                          check=integer(0))
    active_steps: Optional[int] = setting(FROM_COMPONENT, doc="then steps traced and written (null: 2)",
                                          check=integer(1))
    num_cycles: Optional[int] = setting(FROM_COMPONENT, doc="cycles (0: repeat to the end; null: 1)", check=integer(0))

    def check(self, where: str) -> None:
        if self.component != PROFILER:
            raise ValueError(f"{where}._component_={self.component!r} is not accepted: expected {PROFILER} "
                             "(torchtune's recipes take only that one too)")

    def schedule(self) -> dict:
        """``{wait_steps, warmup_steps, active_steps, num_cycles}`` as torchtune fills them (a missing one: its
        default)."""
        # deferred: torchtune (importing the config kit does not need it)
        from torchtune.training._profiler import DEFAULT_SCHEDULE

        given = {k: getattr(self, k) for k in DEFAULT_SCHEDULE}
        return {k: DEFAULT_SCHEDULE[k] if v is None else v for k, v in given.items()}
