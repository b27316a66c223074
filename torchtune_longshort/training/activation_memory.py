"""The recipe's activation memory: torchtune's activation checkpointing of each transformer layer
(``enable_activation_checkpointing``) and torchtune's activation offloading (``enable_activation_offloading``).

Offloading is torchtune 0.6.1's own ``training.get_act_offloading_ctx_manager``: under its context every tensor
autograd saves in the forward pass (at least 1 KiB, not a parameter) is copied to pinned host memory on a side CUDA
stream and copied back when the backward pass needs it. With checkpointing, what autograd saves in the forward is
each layer's input (the inside of a layer is recomputed in backward, after the context has closed, and stays on the
GPU), plus the embedding's token ids and the final norm's input: offloading moves the depth-proportional part of
the activations, one ``[2b, L, d]`` tensor per layer, to host memory. Without checkpointing it would copy every
saved tensor of every op out and back; torchtune refuses that, and so does the config
(:func:`~torchtune_longshort.training.recipe_config.rules.offloading_refusal`).

The context wraps the model's forward only, as torchtune's recipes do. ``LongShortLoss`` runs after it on the
hidden-state output: its fused path computes the output layer's gradients in its forward pass and keeps them on the
GPU for the backward, where offloading would only copy them out and straight back. torchtune's manager also hooks
``model.output`` so that the output projection is never offloaded; with the hidden-state output the decoder's
forward never calls ``output``, and where the loss calls it (an FSDP2-sharded output, or LoRA on the output: the
checkpointed path) the context has closed, so the hooks push and pop an identity pair and saved tensors are kept
exactly as without them.

With torchtune's streams (``use_streams=True``, its default), the last 5 offloaded tensors stay on the GPU until the
backward pass starts (``max_fwd_stash_size``), so that the copies overlap compute: during the loss, those are the
final norm's saved tensors (and the last layer's input); during the forward, the 5 latest layer inputs. Host memory:
every offloaded byte is pinned host memory for the step.

A CPU run is refused, not run as a no-op: offloading moves saved activations from GPU memory to host memory, and a
CPU run's activations are in host memory already (torchtune's ``OffloadActivations`` asks for the default CUDA
stream when it is built, so it cannot even start). A config asking for it there describes a memory plan the run
would silently not follow.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn
from torchtune import modules, training

from torchtune_longshort.training.recipe_config.rules import offloading_refusal


class OffloadedForward:
    """``model(*args, **kwargs)`` under torchtune's activation-offloading context (``ctx``), one context for every
    call (it tracks the forward / backward phases of each step)."""

    def __init__(self, model: nn.Module, ctx: Any) -> None:
        self.model = model
        self.ctx = ctx

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.ctx:
            return self.model(*args, **kwargs)


def set_activation_memory(model: nn.Module, checkpointing: bool, offloading: bool,
                          pin_memory: bool = True) -> Callable[..., Any]:
    """Checkpoint each ``TransformerSelfAttentionLayer`` of ``model`` (``checkpointing``) and return the forward to
    train with: ``model`` itself, or an :class:`OffloadedForward` when ``offloading`` (CUDA and checkpointing only;
    raises ``ValueError`` naming both keys otherwise, before touching ``model``). ``pin_memory`` False: the host
    copies are pageable (torchtune's ``use_pin_memory``), which the recipe does not use: torch's pinned allocator
    holds each block rounded up to a power of two, so a step that moves more than about half the host's memory
    fits only pageable (the 8B memory benchmark at 80 GB)."""
    problem = offloading_refusal(offloading, checkpointing, "cuda" if torch.cuda.is_available() else "cpu")
    if problem is not None:
        raise ValueError(problem)
    if checkpointing:
        training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    if not offloading:
        return model
    ctx = training.get_act_offloading_ctx_manager(model, True)
    ctx.use_pin_memory = pin_memory  # read at each pack / unpack; torchtune's manager builder takes no such argument
    return OffloadedForward(model, ctx)
