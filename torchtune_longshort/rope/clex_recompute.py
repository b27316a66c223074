"""What CLEX keeps for activation checkpointing: the last training forward's state (t, its ODE solution with its
autograd graph, the sampled positions), held for the recomputation of its layers during its backward pass, and the
test of whether a backward pass is running (see the module doc of :mod:`torchtune_longshort.rope.clex`)."""

from __future__ import annotations

from typing import Optional

import torch


def in_backward() -> bool:
    """True while an autograd backward pass runs on this thread (where checkpointing recomputes a forward)."""
    return torch._C._current_graph_task_id() != -1


class RecomputeState:
    """Holds the last training forward's state for recomputation in its backward. Not copied or pickled: a
    ``deepcopy`` of the model (or ``torch.save``) gets an empty holder, not a tensor inside an autograd graph."""

    __slots__ = ("state",)

    def __init__(self, state: Optional[tuple] = None):
        self.state = state

    def __deepcopy__(self, memo):
        return RecomputeState()

    def __reduce__(self):
        return (RecomputeState, ())
