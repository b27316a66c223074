"""A RoPE method with learned parameters (CLEX's frequency ODE) in the recipe, in one process and in several.

Every layer's attention holds the same RoPE module, and the ODE is solved once per model forward in a decoder hook,
outside any FSDP unit's forward. So under FSDP2 its two small weights are left out of the sharding
(``fully_shard``'s ``ignored_params``) and held whole on every rank as replicated DTensors (so that the optimizer,
gradient clipping, the state-dict gather and the resume path treat them as they treat the sharded rest). Each rank's
backward leaves its own gradient in them; :func:`average_replicated_grads` averages those over the ranks before
clipping, as FSDP2 averages the sharded gradients.

For one process and several to train alike, the method's random training draws (CLEX's t and positions) come from
one seeded generator, the same on every rank (:func:`rope_generator`, saved with each checkpoint), and a new run's
learned parameters from a seeded, forked stream (:func:`initial_learned_rope`), not from the model's construction
(a sharded model is built on the meta device).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import nn
from torchtune import training

from torchtune_longshort.models.hf_checkpoint import load_rope_parameters
from torchtune_longshort.models.hf_rope import ROPE_SIDE_FILE
from torchtune_longshort.rope.base import ScaledRoPE, rope_modules

_ROPE_GENERATOR_OFFSET = 7937  # the rope generator's seed is the run's seed plus this (the position sampler: +7919)
_INITIAL_OFFSET = 104729  # a new run's learned RoPE parameters: a stream apart from the LoRA adapters' (seed)


def learned_rope_modules(model: nn.Module) -> List[ScaledRoPE]:
    """The model's RoPE modules that hold learned parameters, each once."""
    return [m for m in rope_modules(model) if any(True for _ in m.parameters(recurse=False))]


def initial_learned_rope(model: nn.Module, seed: int) -> Dict[str, torch.Tensor]:
    """A new run's learned RoPE parameters ``{name in the module: float32 CPU tensor}``, drawn by each method's own
    rule from the stream seeded with ``seed`` (forked: the run's own stream is left as it was)."""
    out: Dict[str, torch.Tensor] = {}
    modules = learned_rope_modules(model)
    if not modules:
        return out
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) + _INITIAL_OFFSET)
        for m in modules:
            out.update(m.initial_learned_parameters())
    return out


def start_learned_rope(model: nn.Module, start_dir: Path, seed: int) -> Dict[str, torch.Tensor]:
    """A new run's learned RoPE parameters: those of the checkpoint it starts from (a CLEX checkpoint fine-tuned
    further: evaluation loads them too), else :func:`initial_learned_rope`. ``ValueError`` when the checkpoint's do
    not fit the model's learned RoPE (another method's, other shapes), naming the side file."""
    drawn = initial_learned_rope(model, seed)
    saved = load_rope_parameters(start_dir) if drawn else {}
    if not saved:
        return drawn
    fits = set(saved) == set(drawn) and all(saved[k].shape == drawn[k].shape for k in drawn)
    if not fits:
        have = {k: tuple(v.shape) for k, v in saved.items()}
        want = {k: tuple(v.shape) for k, v in drawn.items()}
        raise ValueError(f"{Path(start_dir) / ROPE_SIDE_FILE} holds learned RoPE parameters {have}, the model's "
                         f"learned RoPE takes {want}: build the model with the checkpoint's own RoPE (its "
                         "config.json), or start from a checkpoint without that file")
    return {k: v.float() for k, v in saved.items()}


def rope_generator(model: nn.Module, seed: int, recipe_state: Optional[Dict[str, Any]]) -> Optional[torch.Generator]:
    """The generator of the model's RoPE training draws, set on its RoPE modules: seeded from ``seed`` (the same on
    every rank), restored from ``recipe_state`` for an exact resume; None when no RoPE module draws (no learned
    parameters)."""
    modules = learned_rope_modules(model)
    if not modules:
        return None
    gen = torch.Generator().manual_seed(int(seed) + _ROPE_GENERATOR_OFFSET)
    if recipe_state is not None and recipe_state.get("rope_generator") is not None:
        gen.set_state(recipe_state["rope_generator"])
    for m in modules:
        m.generator = gen
    return gen


def shard_model(model: nn.Module, shard_conditions: List[Callable[[str, nn.Module], bool]],
                reshard_after_forward: bool) -> None:
    """FSDP2 as torchtune's ``training.shard_model`` applies it, with the learned RoPE parameters left out of every
    unit and made replicated DTensors on the units' mesh. Without learned RoPE parameters: torchtune's own."""
    ignored = {p for m in learned_rope_modules(model) for p in m.parameters(recurse=False)}
    if not ignored:
        training.shard_model(model=model, shard_conditions=shard_conditions, cpu_offload=False,
                             reshard_after_forward=reshard_after_forward)
        return
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Replicate

    for n, m in reversed(list(model.named_modules())):
        if any(condition(n, m) for condition in shard_conditions):
            fully_shard(m, reshard_after_forward=reshard_after_forward, ignored_params=ignored)
    fully_shard(model, reshard_after_forward=reshard_after_forward, ignored_params=ignored)
    mesh = next(p.device_mesh for p in model.parameters() if isinstance(p, DTensor))
    for m in learned_rope_modules(model):
        for name, p in list(m.named_parameters(recurse=False)):
            whole = DTensor.from_local(p.detach(), mesh, [Replicate()] * mesh.ndim, run_check=False)
            setattr(m, name, nn.Parameter(whole, requires_grad=p.requires_grad))


def average_replicated_grads(model: nn.Module) -> None:
    """Average the replicated (DTensor) learned RoPE gradients over the ranks, in place, in one all-reduce; a no-op
    in one process.

    Every rank holds the gradient of its own rows. A rank without one (CLEX drew t = 1: no ODE solve) counts as a
    zero gradient; where no rank has one the gradient stays None (the optimizer skips the parameter, as in one
    process). The ranks draw t from one shared generator, so they have or lack it together."""
    params = [p for m in learned_rope_modules(model) for p in m.parameters(recurse=False)
              if p.requires_grad and hasattr(p, "device_mesh")]
    if not params:
        return
    from torch.distributed.tensor import DTensor

    mesh = params[0].device_mesh
    local = [p.to_local() for p in params]
    flat = torch.cat([torch.tensor([float(p.grad is not None) for p in params], device=local[0].device)]
                     + [(p.grad.to_local() if p.grad is not None else torch.zeros_like(x)).reshape(-1).float()
                        for p, x in zip(params, local)])
    torch.distributed.all_reduce(flat, group=mesh.get_group())
    offset = len(params)
    for i, (p, x) in enumerate(zip(params, local)):
        mean = flat[offset:offset + x.numel()].view_as(x).div_(mesh.size()).to(x.dtype)
        offset += x.numel()
        if flat[i] == 0:
            continue
        if p.grad is None:
            p.grad = DTensor.from_local(mean, mesh, p.placements, run_check=False)
        else:
            p.grad.to_local().copy_(mean)
