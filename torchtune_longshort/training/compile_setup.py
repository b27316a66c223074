"""The recipe's ``compile: True``: ``torch.compile`` per decoder layer, as torchtune's ``training.compile_model``
does, and one log line for each part that runs eager, saying why.

**Compiled**: every ``TransformerSelfAttentionLayer`` / ``TransformerCrossAttentionLayer`` of the decoder, one
``torch.compile`` each (backend ``$TORCH_COMPILE_BACKEND``, default inductor, as torchtune). The layers share one code
object and one set of shapes, so they share one graph: the first layer's first call compiles it (forward and, here,
backward: ``force_non_lazy_backward_lowering``), the others reuse it. What a layer calls is inside its graph: the RoPE
module (every method's cos/sin and rotation) and the attention hooks a method installs (EABF's query factor, CLEX's
log-scale).

**Eager** (each named in one line at setup):

- the loss (``LongShortLoss``, with the output projection it applies chunk by chunk): its chunk boundaries are
  Python integers that depend on the shift ``e``, drawn anew every step, and ``e`` takes up to L/2 values. Tried
  on the project's 2-core CPU (``torch.compile`` of the whole loss, L 64, vocabulary 512): the fused path compiled a
  new graph for every new ``e`` (4 graphs in 4 steps, 32-44 s each); the checkpointed path with dynamic shapes took
  523 s for its first graph. So it stays eager.
- the token embedding and the final norm: outside the layers, as in torchtune's per-layer compile.
- what a RoPE method names in its ``compile_note`` / ``compile_eager_methods``: CLEX draws ``t`` and solves its
  frequency ODE in a decoder hook, once per model forward, and computes cos/sin eager inside the layers (a graph
  break): with activation checkpointing, a compiled CLEX layer picked another graph for its recomputation than for
  its forward and torch's checkpoint refused it (``CheckpointError``).

**Never a crash**: a ``TORCH_COMPILE_BACKEND`` that names no backend, or a layer whose compilation fails (inductor
finds no working C++ compiler, an operator it cannot lower, ...), makes every layer run eager from then on, with one
line naming the layer (or the backend) and the error; an error of the model itself still surfaces, from the eager
call. A graph compiled after the first one (a guard of the earlier graphs failed: CLEX's ``t = 1`` step, whose
frequencies carry no ODE gradient; validation under ``no_grad``; a new shape) is logged with the layer, its call
number and the guard that failed as dynamo records it (``GLOBAL_STATE changed: grad_mode``), so a per-step recompile
shows in the run's log.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch
import torch._dynamo
from torch._functorch import config as functorch_config
from torch import nn
from torch._dynamo.utils import counters, guard_failures
from torchtune.modules import TransformerCrossAttentionLayer, TransformerSelfAttentionLayer

from torchtune_longshort.plural import counted
from torchtune_longshort.training.module_names import clean_module_name

COMPILED_LAYERS = (TransformerSelfAttentionLayer, TransformerCrossAttentionLayer)

LOSS_EAGER = (
    "compile: the loss (LongShortLoss with the output projection) runs eager: its chunk boundaries follow e, drawn "
    "anew each step, and a compiled loss compiled a new graph for every new e"
)
OUTSIDE_LAYERS_EAGER = "compile: the token embedding and the final norm run eager (outside the layers, as torchtune)"


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process (every caller of ``torch.compile`` counts)."""
    return counters["stats"]["unique_graphs"]


def guard_failure_counts() -> dict:
    """How many guard failures dynamo has recorded per compiled code object so far (its ``guard_failures``)."""
    return {code: len(reasons) for code, reasons in guard_failures.items()}


def newest_guard_failure(before: dict) -> Optional[str]:
    """The first line of a guard failure dynamo recorded since ``before`` (:func:`guard_failure_counts`), without
    its compile id (``0/0: GLOBAL_STATE changed: grad_mode`` reads ``GLOBAL_STATE changed: grad_mode``); None when
    none was recorded."""
    for code, reasons in guard_failures.items():
        if len(reasons) > before.get(code, 0):
            first = str(reasons[-1]).strip().splitlines()[0] if str(reasons[-1]).strip() else ""
            head, sep, rest = first.partition(": ")
            return (rest if sep and "/" in head else first)[:240] or None
    return None


def failure_reason(error: BaseException) -> str:
    """The innermost cause of a compile failure as ``Type: first line`` (dynamo wraps a backend's error)."""
    inner = error
    while True:
        nxt = getattr(inner, "inner_exception", None) or inner.__cause__
        if nxt is None or nxt is inner:
            break
        inner = nxt
    lines = [s.strip() for s in str(inner).splitlines() if s.strip()]
    text = lines[0] if lines else ""
    return f"{type(inner).__name__}: {text[:240]}" if text else type(inner).__name__


@dataclass
class LayerCompile:
    """What happened to the compiled layers: the graphs each call compiled, and the failure that made them eager."""

    note: Callable[[str], None]
    backend: str
    failed: Optional[str] = None  # "<layer>: <reason>" once a compilation failed; every layer then runs eager
    events: List[Tuple[str, int, int, float]] = field(default_factory=list)  # (layer, call, new graphs, seconds)
    layers: List[str] = field(default_factory=list)

    @property
    def graphs(self) -> int:
        """Graphs the layers compiled so far."""
        return sum(n for _, _, n, _ in self.events)


# compile the backward graph with the forward one (a config key of recent torch; older torch compiles it lazily)
_BACKWARD_NOW = ({"force_non_lazy_backward_lowering": True}
                 if hasattr(functorch_config, "force_non_lazy_backward_lowering") else {})


class CompiledCall:
    """A layer's ``_compiled_call_impl`` (what ``nn.Module.__call__`` runs once ``module.compile()`` set it): its
    ``_call_impl`` under ``torch.compile``, falling back to the eager ``_call_impl`` when compilation fails."""

    def __init__(self, module: nn.Module, name: str, state: LayerCompile):
        self.name = name
        self.state = state
        self.calls = 0
        self._eager = module._call_impl
        self._compiled = torch.compile(module._call_impl, backend=state.backend)

    def __call__(self, *args, **kwargs):
        state = self.state
        if state.failed is not None:
            return self._eager(*args, **kwargs)
        self.calls += 1
        before, failures, start = graphs_compiled(), guard_failure_counts(), time.perf_counter()
        try:
            # the backward graph is compiled with the forward one, so that its failure is caught here too
            with functorch_config.patch(_BACKWARD_NOW):
                out = self._compiled(*args, **kwargs)
        except torch._dynamo.exc.TorchDynamoException as e:
            state.failed = f"{self.name}: {failure_reason(e)}"
            state.note(f"compile: the decoder layers run eager: compiling {state.failed}")
            return self._eager(*args, **kwargs)
        new = graphs_compiled() - before
        if new:
            seconds = time.perf_counter() - start
            state.events.append((self.name, self.calls, new, seconds))
            if len(state.events) == 1:
                state.note(f"compile: {self.name} compiled the layers' graph at its call 1 ({seconds:.1f} s)")
            else:
                why = newest_guard_failure(failures) or "TORCH_LOGS=recompiles says which"
                state.note(
                    f"compile: {self.name} compiled {counted(new, 'more graph')} at its call {self.calls} "
                    f"({seconds:.1f} s; {state.graphs} in all): a guard of the earlier graphs failed ({why})"
                )
        return out


def compile_decoder(model: nn.Module, enabled: bool, note: Callable[[str], None]) -> Optional[LayerCompile]:
    """``compile: True``: compile each decoder layer of ``model`` in place and log (through ``note``) what runs
    eager and why (module doc). Returns the layers' :class:`LayerCompile` record, or None when ``enabled`` is false.

    Call it before the weights are loaded or sharded (as torchtune's recipes call ``compile_model``).
    """
    if not enabled:
        return None
    state = LayerCompile(note=note, backend=os.environ.get("TORCH_COMPILE_BACKEND", "inductor"))
    try:
        torch._dynamo.lookup_backend(state.backend)
    except torch._dynamo.exc.InvalidBackend:
        state.failed = f"TORCH_COMPILE_BACKEND={state.backend!r} is not a torch.compile backend"
        note(f"compile: the decoder layers run eager: {state.failed} (torch._dynamo.list_backends() names them)")
        return state
    for name, m in model.named_modules():
        if isinstance(m, COMPILED_LAYERS):
            m._compiled_call_impl = CompiledCall(m, clean_module_name(name), state)
            state.layers.append(clean_module_name(name))
    note(f"compile: {len(state.layers)} decoder layers compiled one by one (torch.compile, backend {state.backend})")
    note(OUTSIDE_LAYERS_EAGER)
    for rope in {id(m): m for m in model.modules() if getattr(m, "compile_note", None)}.values():
        for method in rope.compile_eager_methods:  # a graph break: the layer's graphs call it eagerly
            setattr(rope, method, torch.compiler.disable(getattr(rope, method)))  # no reason=: older torch
        note(f"compile: {rope.method} RoPE: {rope.compile_note}")
    note(LOSS_EAGER)
    return state

