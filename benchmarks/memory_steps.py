"""One training step of the recipe, cut into phases and measured on the CPU: the points the memory model
(``memory_model.py``) fits (issue 34, item 4).

The step is the recipe's (``LongShortFinetuneRecipe._train_step`` with one micro-batch of one dual-window sample):

- the decoder forward of both windows stacked on the batch dimension (``torch.cat([tokens_a, tokens_b])``,
  ``[2, L]``), every layer checkpointed (``training.activation_memory.set_activation_memory``, as the recipe);
- ``LongShortLoss(alpha=0.1)`` on the fused hidden-state path, ``e = L/4``, ``num_chunks`` 8 (the default) unless
  said otherwise;
- its backward, then ``AdamW(fused=True)`` (the shipped configs' optimizer) ``step`` and ``zero_grad``.

Full fine-tune: every parameter trains (its gradient and both AdamW states in the parameter dtype). LoRA: rank-8
adapters on q / v / output projections and the MLP, alpha 16 (torchtune's Llama-3.1-8B LoRA config), base frozen.
The AdamW states exist before the step (primed with one step on zero gradients: the steady state). Not in it:
gradient clipping (in place), the LR schedule, validation, checkpoint saves.

Shapes: the real Llama-3.2-1B (tied embeddings, full fine-tune, 16 layers) and the Llama-3.1-8B width (LoRA, 32
layers), measured at depth 1 and 2, plus 1/8-width replicas of each in fp32 and bf16. The live tensor bytes
(parameters, optimizer states and everything the step allocates) peak in each phase. Offloading on the CPU:
:class:`HostOffload` does what torchtune's ``OffloadActivations`` does to device memory (same size and parameter
rules, the 5 latest tensors kept until backward) with a host copy outside torch's allocator, so the moved bytes
leave the measured memory exactly as they leave a GPU.

    python benchmarks/memory_model.py measure [--only 1b-full]   # appends to memory_model_points.json (hours)
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional

import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

POINTS = HERE / "memory_model_points.json"
PHASES = ("forward", "loss", "backward", "optimizer")
ALPHA = 0.1
BOUNDED_CHUNK = 1024  # "bounded" num_chunks: ceil((L + e) / 1024) shared positions a chunk
GB = 10**9
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Shape:
    name: str
    vocab: int
    dim: int
    heads: int
    kv: int
    hidden: int
    layers: int  # full depth
    lora_rank: int = 0  # 0: full fine-tune
    tied: bool = False

    def build(self, depth: int, max_seq_len: int):
        if self.lora_rank:
            from torchtune.models.llama3_1._component_builders import lora_llama3_1

            return lora_llama3_1(["q_proj", "v_proj", "output_proj"], True, False, vocab_size=self.vocab,
                                 num_layers=depth, num_heads=self.heads, num_kv_heads=self.kv, embed_dim=self.dim,
                                 max_seq_len=max_seq_len, intermediate_dim=self.hidden, lora_rank=self.lora_rank,
                                 lora_alpha=2 * self.lora_rank)
        from torchtune.models.llama3_2._component_builders import llama3_2

        return llama3_2(vocab_size=self.vocab, num_layers=depth, num_heads=self.heads, num_kv_heads=self.kv,
                        embed_dim=self.dim, max_seq_len=max_seq_len, intermediate_dim=self.hidden,
                        tie_word_embeddings=self.tied)


SHAPES = {
    "1b-full": Shape("1b-full", 128256, 2048, 32, 8, 8192, 16, tied=True),
    "8b-lora": Shape("8b-lora", 128256, 4096, 32, 8, 14336, 32, lora_rank=8),
}
# 1/8 of the width (heads too, so the head size and every per-token tensor's share are the same), a 64-token
# vocabulary (the loss's [rows, vocab] buffers, handled apart, stay negligible): the bf16 / fp32 ratios of ``a``
REPLICAS = {
    "1b-full": replace(SHAPES["1b-full"], name="1b-full/8", vocab=64, dim=256, heads=4, kv=1, hidden=1024),
    "8b-lora": replace(SHAPES["8b-lora"], name="8b-lora/8", vocab=64, dim=512, heads=4, kv=1, hidden=1792,
                       lora_rank=1),
}
GRID = {  # window lengths measured per shape (each run is one step on 2 shared cores: minutes at the largest)
    "1b-full": (256, 512, 1024, 2048),
    "8b-lora": (128, 256, 512, 1024),
}
REPLICA_GRID = (256, 512, 1024)
TILE, TILE_CHECK = 256, 512  # the recipe's tiled_mlp_tokens in the tiled points; a second size separates its bytes


def loss_rows(L: int, e: int, num_chunks: int) -> int:
    """Rows of the loss's largest chunk (both windows, batch 1): the ``[rows, vocab]`` buffers' height."""
    from torchtune_longshort.loss.chunking import target_chunks
    from torchtune_longshort.windows import aligned_positions

    return max(c.n_a + c.n_b for c in target_chunks(L, e, aligned_positions(L, e), num_chunks))


def bounded_chunks(L: int, e: int) -> int:
    return max(8, math.ceil((L + e) / BOUNDED_CHUNK))


# ---------------------------------------------------------------------------------------------- the step
class HostOffload:
    """CPU stand-in for torchtune's ``OffloadActivations`` (which needs CUDA), for memory accounting only.

    Its pack rule: a saved tensor of at least ``min_bytes`` that is not a parameter leaves device memory, the
    ``stash`` latest ones stay until backward starts (torchtune's ``max_fwd_stash_size``, streams on); unpacking
    allocates it again. The host copy is a numpy array, outside torch's allocator, so the profiler sees exactly
    the device-side allocations. ``moved_bytes``: bytes moved out per step."""

    def __init__(self, min_bytes: int = 1024, stash: int = 5):
        import torch

        self.moved_bytes = 0
        self._stash: Dict[int, object] = {}
        self._id = 0

        def pack(t):
            n = t.element_size() * t.nelement()
            if n < min_bytes or isinstance(t, (torch.nn.Parameter, torch.nn.Buffer)):
                return (None, t)
            self._id += 1
            for k in [k for k in self._stash if k <= self._id - stash]:
                del self._stash[k]
            self._stash[self._id] = t
            self.moved_bytes += n
            return (self._id, (t.detach().numpy().copy(), t.dtype, tuple(t.shape)))

        def unpack(packed):
            tid, held = packed
            if tid is None:
                return held
            kept = self._stash.pop(tid, None)
            self._stash.clear()  # backward has started: torchtune drops its forward stash
            if kept is not None:
                return kept
            host, dtype, shape = held
            out = torch.empty(shape, dtype=dtype)
            out.copy_(torch.from_numpy(host))
            return out

        self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)


@dataclass
class Step:
    model: object
    optimizer: object
    run: object  # () -> loss
    host: Optional[HostOffload]
    L: int
    e: int
    num_chunks: int


def make_step(shape: Shape, depth: int, L: int, device: str = "cpu", dtype: str = "fp32", *, offload: bool = False,
              num_chunks: int = 8, seed: int = 0, tile: Optional[int] = None, pin_memory: bool = True) -> Step:
    """The model (``depth`` layers), a primed ``AdamW(fused=True)`` and one dual-window batch; ``run()`` does one
    step cut into ``phase:<name>`` profiler ranges. Offloading is torchtune's on CUDA, :class:`HostOffload` on a CPU;
    ``tile``: the recipe's ``tiled_mlp_tokens``; ``pin_memory`` False: offloading's host copies pageable."""
    import torch
    from torch.profiler import record_function
    from torchtune import training
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    from torchtune_longshort.loss import LongShortLoss
    from torchtune_longshort.training.activation_memory import set_activation_memory
    from torchtune_longshort.training.tiled_mlp import tile_mlps

    e = L // 4
    torch.manual_seed(seed)
    # torch's dtype directly: torchtune's get_dtype refuses bf16 on a CPU without native bf16 (slow here, but exact)
    with training.set_default_dtype(DTYPES[dtype]), torch.device(device):
        model = shape.build(depth, L)
    for j, layer in enumerate(model.layers):  # backward reaches layer j: a "mark:bwd_layer<j>" profiler event
        layer.register_forward_hook(_backward_marker(j))
    if shape.lora_rank:
        set_trainable_params(model, get_adapter_params(model))
    on_gpu = torch.device(device).type == "cuda"
    forward = set_activation_memory(model, True, offload and on_gpu, pin_memory)
    tile_mlps(model, tile, lambda _msg: None)
    host = HostOffload() if offload and not on_gpu else None
    loss_fn = LongShortLoss(alpha=ALPHA, num_chunks=num_chunks)
    loss_fn.set_model_output(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
    for p in params:  # AdamW's states exist before a steady-state step
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    seq = torch.randint(0, shape.vocab, (1, L + e + 1), generator=torch.Generator().manual_seed(seed)).to(device)
    tokens = torch.cat([seq[:, :L], seq[:, e:e + L]])
    la, lb = seq[:, 1:L + 1], seq[:, e + 1:e + L + 1]

    def run():
        with record_function("phase:forward"), (host.hooks if host else contextlib.nullcontext()):
            hidden = forward(tokens)
        with record_function("phase:loss"):
            out = loss_fn(hidden[:1], hidden[1:], la, lb, e)
        del hidden  # the recipe's _loss_step returns the loss only
        with record_function("phase:backward"):
            out.loss.backward()
        with record_function("phase:optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return out.loss.detach()

    return Step(model, opt, run, host, L, e, num_chunks)


def _backward_marker(j: int):
    """A forward hook whose output's gradient hook marks, in the profiler, where layer ``j``'s backward starts."""
    from torch.profiler import record_function

    def mark(_grad):
        with record_function(f"mark:bwd_layer{j}"):
            pass

    def hook(_module, _args, out):
        if getattr(out, "requires_grad", False):
            out.register_hook(mark)

    return hook


def live_bytes(step: Step) -> int:
    """Bytes of the distinct storages the step starts with: parameters, buffers, optimizer states."""
    seen = {}
    tensors = list(step.model.parameters()) + list(step.model.buffers())
    tensors += [t for s in step.optimizer.state.values() for t in s.values() if hasattr(t, "untyped_storage")]
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


# ---------------------------------------------------------------------------------------------- measuring
def _phase_peaks(prof, device: str = "cpu") -> Dict[str, int]:
    """Peak live bytes allocated since the profiler started, inside each ``phase:<name>`` range, and inside the
    backward's sub-ranges: ``bwd_head`` (the loss and the final norm, before the last layer) and ``bwd_layer<j>``
    (from layer ``j``'s ``mark:`` event to the next one: its recomputation and backward; layer 0's includes the
    embedding's)."""
    from torch._C._profiler import _EventType

    allocs, ranges, marks = [], {}, {}
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        ev = stack.pop()
        stack.extend(ev.children)
        if ev.tag == _EventType.Allocation and str(ev.extra_fields.device).split(":")[0] == device:
            allocs.append((ev.start_time_ns, ev.extra_fields.ptr, ev.extra_fields.alloc_size))
        elif ev.name.startswith("phase:"):
            ranges[ev.name[len("phase:"):]] = (ev.start_time_ns, ev.end_time_ns)
        elif ev.name.startswith("mark:"):
            marks[ev.name[len("mark:"):]] = ev.start_time_ns
    b0, b1 = ranges["backward"]
    cuts = sorted(marks.items(), key=lambda kv: kv[1])
    edges = [t for _, t in cuts] + [b1]
    ranges["bwd_head"] = (b0, edges[0])
    for (name, t0), t1 in zip(cuts, edges[1:]):
        ranges[name] = (t0, t1)
    allocs.sort(key=lambda x: x[0])
    live, cur, peaks = {}, 0, {name: None for name in ranges}
    for t, ptr, size in allocs:
        for name, (t0, _) in ranges.items():
            if peaks[name] is None and t >= t0:
                peaks[name] = cur  # the level the range starts from
        if size > 0:
            live[ptr] = size
            cur += size
        elif ptr in live:
            cur -= live.pop(ptr)
        for name, (t0, t1) in ranges.items():
            if t0 <= t < t1 or (t == t1 and name in PHASES):
                peaks[name] = max(peaks[name] or 0, cur)
    return {name: (v if v is not None else cur) for name, v in peaks.items()}


def measure(shape: Shape, depth: int, L: int, dtype: str = "fp32", offload: bool = False,
            num_chunks: int = 8, tile: Optional[int] = None) -> dict:
    """One CPU step's live tensor bytes per phase (parameters and optimizer states included)."""
    step = make_step(shape, depth, L, "cpu", dtype, offload=offload, num_chunks=num_chunks, tile=tile)
    out = measure_step(step, shape.name, depth, dtype, offload)
    if tile is not None:
        out["tile"] = tile
    del step
    gc.collect()
    return out


def measure_step(step: Step, name: str, depth: int, dtype: str, offload: bool) -> dict:
    """Run ``step`` once under the profiler: its point (see :func:`measure`)."""
    from tensor_memory import PeakTensorMemory

    base = live_bytes(step)
    t0 = time.perf_counter()
    with PeakTensorMemory() as mem:
        step.run()
    phases = _phase_peaks(mem._prof)
    return dict(shape=name, depth=depth, L=step.L, e=step.e, num_chunks=step.num_chunks,
                rows=loss_rows(step.L, step.e, step.num_chunks), dtype=dtype, offload=offload, base=base,
                peak=base + mem.peak_bytes, phases={p: base + v for p, v in phases.items()},
                moved_bytes=step.host.moved_bytes if step.host else 0, seconds=round(time.perf_counter() - t0, 1))


def plan() -> List[dict]:
    """Every point ``measure`` takes: the fp32 replicas, each shape's grid at depth 1 and 2, offloading off and
    on, plus ``num_chunks`` 32 at the largest window (it separates ``k``), then the bf16 replicas (slow here)."""
    todo = []
    replicas = lambda dtype: [dict(shape=rep.name, depth=d, L=L, dtype=dtype, offload=False, num_chunks=8)  # noqa: E731
                              for rep in REPLICAS.values() for d in (1, 2) for L in REPLICA_GRID]
    todo += replicas("fp32")
    for key, Ls in GRID.items():
        for off in (False, True):
            todo += [dict(shape=key, depth=d, L=L, dtype="fp32", offload=off, num_chunks=8) for d in (1, 2) for L in Ls]
            todo.append(dict(shape=key, depth=1, L=Ls[-1], dtype="fp32", offload=off, num_chunks=32))
    todo += replicas("bf16")
    return todo + plan_tiled()


def plan_tiled() -> List[dict]:
    """The tiled MLP's points (``tile``: the recipe's ``tiled_mlp_tokens``): the 8B LoRA shape (whose longest
    window the MLP's intermediates limit), offloading on first, and its replica in both dtypes; each at
    :data:`TILE` over the grid plus one point at :data:`TILE_CHECK` (the tile's own bytes per row)."""
    def one(shape, Ls, dtype, offload):
        pts = [dict(shape=shape, depth=d, L=L, dtype=dtype, offload=offload, num_chunks=8, tile=TILE)
               for d in (1, 2) for L in Ls]
        return pts + [dict(pts[-1], tile=TILE_CHECK)]

    rep = REPLICAS["8b-lora"].name
    return (one(rep, REPLICA_GRID, "fp32", False) + one("8b-lora", GRID["8b-lora"][1:], "fp32", True)
            + one(rep, REPLICA_GRID, "bf16", False) + one("8b-lora", GRID["8b-lora"][1:], "fp32", False))


CHECKS = [dict(shape="1b-full", depth=4, L=1024), dict(shape="8b-lora", depth=4, L=512),  # not in the fit
          dict(shape="8b-lora", depth=4, L=512, tile=TILE)]


def plan_checks() -> List[dict]:
    """Depth-4 points, with and without offloading (the tiled MLP's too), that the fit (depths 1 and 2) must
    predict."""
    return [dict(c, dtype="fp32", offload=off, num_chunks=8) for c in CHECKS for off in (False, True)]


def _key(p: dict) -> tuple:
    return (p["shape"], p["depth"], p["L"], p["dtype"], p["offload"], p["num_chunks"], p.get("tile"))


def load_points(path: Path = POINTS, key: str = "points") -> List[dict]:
    """The measured points (``key`` "points", what the fit uses) or the depth checks (``key`` "checks")."""
    return json.loads(path.read_text()).get(key, []) if path.exists() else []


def run_measure(only: Optional[str], path: Path = POINTS, key: str = "points") -> None:
    """Measure the points of :func:`plan` (``key`` "checks": :func:`plan_checks`) not yet in ``path`` (saved after
    each, so an interrupted run resumes)."""
    from torchtune_longshort.provenance import provenance

    shapes = {**{s.name: s for s in SHAPES.values()}, **{s.name: s for s in REPLICAS.values()}}
    store = json.loads(path.read_text()) if path.exists() else {}
    points = store.setdefault(key, [])
    done = {_key(p) for p in points}
    for todo in plan() if key == "points" else plan_checks():
        if _key(todo) in done or (only and not todo["shape"].startswith(only)):
            continue
        args = {k: v for k, v in todo.items() if k != "shape"}
        p = measure(shapes[todo["shape"]], **args)
        print(f"  {p['shape']} n={p['depth']} L={p['L']} {p['dtype']} offload={p['offload']} chunks={p['num_chunks']}"
              f" tile={p.get('tile')}:"
              f" peak {p['peak'] / 2**20:.0f} MiB ({p['seconds']} s)", file=sys.stderr, flush=True)
        points.append(p)
        store["provenance"] = provenance(device="cpu")
        path.write_text(json.dumps(store, indent=1))
