"""Put a RoPE scaling method on any torchtune RoPE decoder (Llama-2, Llama-3, Mistral, Qwen2, their LoRA forms).

``apply_rope_scaling`` swaps every attention's ``pos_embeddings`` for one shared module from
``torchtune_longshort.rope`` built for the target length, installs the attention-level hooks some methods need
(EABF's query factor, CLEX's once-per-forward draw of t and positions, CLEX's optional query log-scale), updates
each ``max_seq_len`` torchtune keeps (decoder, attention; ``setup_caches`` reads the decoder's), and records the
scaling in ``model.rope_scaling`` for checkpointers (see ``models.hf_rope``).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.rope import ROPE_METHODS, build_rope, check_rope_method
from torchtune_longshort.rope.base import ScaledRoPE
from torchtune_longshort.rope.checks import check_positive_int

logger = logging.getLogger(__name__)

_HOOKS_ATTR = "_longshort_rope_hooks"

# The RoPE spec of the step whose learned parameters the model being built will load instead of its start
# checkpoint's (a resumed run's step_<k>), set by :func:`learned_parameters_from`; None: the start checkpoint's.
_LEARNED_FROM: contextvars.ContextVar[Optional[Dict[str, Any]]] = contextvars.ContextVar("_LEARNED_FROM",
                                                                                         default=None)


@contextlib.contextmanager
def learned_parameters_from(step_spec: Optional[Dict[str, Any]]) -> Iterator[None]:
    """Within it, ``rope_scaled`` weighs its learned settings (:func:`kept_learned_settings`) against ``step_spec``
    (a resumed step's ``longshort_rope``, whose learned parameters the recipe then loads), not against the start
    checkpoint's: a resumed CLEX run whose node gives ``act: tanh`` over a silu start checkpoint said
    ``act='tanh' replaces 'silu'`` again, although its step was trained under tanh and nothing was replaced."""
    token = _LEARNED_FROM.set(step_spec)
    try:
        yield
    finally:
        _LEARNED_FROM.reset(token)


def rope_attention_layers(model: nn.Module) -> List[Tuple[int, nn.Module]]:
    """``(layer index, attention module)`` for every attention in ``model.layers`` that has a RoPE module."""
    from torchtune.modules import MultiHeadAttention

    layers = getattr(model, "layers", None)
    if layers is None:
        raise ValueError(f"model of type {type(model).__name__} has no .layers: expected a torchtune "
                         "TransformerDecoder")
    found = []
    for i, layer in enumerate(layers):
        for m in layer.modules():
            if isinstance(m, MultiHeadAttention) and m.pos_embeddings is not None:
                found.append((i, m))
    if not found:
        raise ValueError(
            f"model of type {type(model).__name__} has no attention with a positional embedding (pos_embeddings): "
            "apply_rope_scaling needs a RoPE decoder"
        )
    return found


# torchtune's RoPE modules that rotate halves (transformers' layout: their weights load without a q/k permutation);
# its Llama/Mistral/Gemma RoPE pairs dimensions interleaved.
_HALF_LAYOUT_ROPES = ("Qwen2RotaryPositionalEmbeddings", "Phi3RotaryPositionalEmbeddings")


def _layout_of(rope: nn.Module) -> str:
    if isinstance(rope, ScaledRoPE):
        return rope.layout
    return "half" if type(rope).__name__ in _HALF_LAYOUT_ROPES else "interleaved"


def _module_device(m: nn.Module) -> torch.device:
    for t in list(m.buffers()) + list(m.parameters()):
        return t.device
    return torch.device("cpu")


def _remove_hooks(model: nn.Module) -> None:
    for h in getattr(model, _HOOKS_ATTR, []):
        h.remove()
    setattr(model, _HOOKS_ATTR, [])
    model.__dict__.pop("_longshort_rope", None)  # the per-forward hooks' RoPE (_install_per_forward)


# The hooks below find the RoPE module through the module they are called on, never through a closure: a deep copy
# of the model (an EMA, a frozen reference) copies the hook functions as they are, so a captured module would be the
# original's (the copy's CLEX forward prepared the original's RoPE, and its own ODE parameters got no gradient).


def _install_query_scale(model: nn.Module, rope: nn.Module, attentions) -> None:
    """Scale each attention's query by ``rope.query_scale(positions, layer_idx)`` (EABF, CLEX log-scale).

    The factor is applied to ``q_proj``'s output: a per-position scalar commutes with the RoPE rotation that
    follows, so this equals scaling the rotated query, and k is untouched. The attention's pre-hook hands its
    ``pos_embeddings`` and positions to the ``q_proj`` hook that runs inside it.
    """
    hooks = getattr(model, _HOOKS_ATTR)
    for layer_idx, attn in attentions:
        if rope.query_scale(torch.zeros(1, 1, dtype=torch.long), layer_idx) is None:
            continue  # exempt layer
        state: Dict[str, Any] = {}

        def pre_hook(module, args, kwargs, state=state):
            x = args[0] if args else kwargs["x"]
            state["rope"] = module.pos_embeddings
            state["input_pos"] = kwargs.get("input_pos")
            state["seq_len"] = x.shape[1]

        def q_hook(module, args, output, state=state, layer_idx=layer_idx):
            pos = state.get("input_pos")
            if pos is None:
                pos = torch.arange(state["seq_len"], device=output.device)[None, :]
            scale = state["rope"].query_scale(pos.to(output.device), layer_idx)
            return output * scale.to(output.dtype)[..., None]

        hooks.append(attn.register_forward_pre_hook(pre_hook, with_kwargs=True))
        hooks.append(attn.q_proj.register_forward_hook(q_hook))


def _install_per_forward(model: nn.Module, rope: nn.Module) -> None:
    """Call ``rope.prepare`` once per decoder forward (CLEX draws its t and training positions there, shared by q
    and k of every layer) and ``rope.clear`` after it. The decoder holds its RoPE in a tuple: not a second
    registration of the attentions' module (no state-dict key, no parameter counted twice), and a deep copy maps it
    to the copy's own; its layers may be wrapped later (activation checkpointing renames their submodules)."""
    hooks = getattr(model, _HOOKS_ATTR)
    model._longshort_rope = (rope,)

    def pre_hook(module, args, kwargs):
        tokens = args[0] if args else kwargs["tokens"]
        module._longshort_rope[0].prepare(tokens.shape[1], kwargs.get("input_pos"))

    def post_hook(module, args, kwargs, output):
        module._longshort_rope[0].clear()

    hooks.append(model.register_forward_pre_hook(pre_hook, with_kwargs=True))
    hooks.append(model.register_forward_hook(post_hook, with_kwargs=True))


# Set by ``hf_decoder`` on a model built from a folder at a ``max_seq_len`` past the positions its checkpoint was
# trained at (``models.folder_rope.scaling_start_past_checkpoint``): {"max_seq_len", "trained", "field"}.
UNSEEN_START_ATTR = "_longshort_unseen_scaling_start"


def scaling_start_refusal(method: Any, start: int, target: Any, trained: int, *, start_field: str,
                          target_field: str, other_start: str, where: str = "inside rope_scaled") -> ValueError:
    """The refusal of a scaling that would start from ``start`` positions, past the ``trained`` ones of the
    checkpoint (at the target: factor 1, no scaling), naming the caller's fields (a config's paths, or Python's
    arguments)."""
    cls = ROPE_METHODS.get(method) if isinstance(method, str) else None
    if cls is None or cls.has_factor:
        ratio = f" = {target / start:g}" if isinstance(target, (int, float)) and not isinstance(target, bool) else ""
        said = f"{method} factor {target}/{start}{ratio} where {target_field} is the target"
    else:
        said = f"{method}'s original_max_seq_len, {target_field}={target} the target"
    return ValueError(f"{start_field}={start} {where} is the length the scaling starts from ({said}), past the "
                      f"{trained} positions "
                      f"the checkpoint was trained at (its config.json): drop {start_field} (or {other_start} to mean "
                      "another start)")


# (method, target) pairs whose factor-1 warning :func:`check_scaling_target` gave in this process
_SAID_UNSCALED: set = set()


def check_scaling_target(method: Any, target: Any, start: Any, factor_given: bool, target_field: str) -> None:
    """``rope_scaled``'s target ``target`` is no shorter than the ``start`` positions its scaling starts from (a
    method with a factor): the default factor ``target / start`` would be < 1, and with a factor given the scaled
    model would cover fewer positions than it starts from. At ``start`` itself, without a factor, it warns (once a
    process) that the default factor 1 leaves the RoPE unscaled. Loading a scaled checkpoint for a shorter run (its own
    factor, fewer positions) is another thing: ``apply_rope_scaling`` takes it."""
    cls = ROPE_METHODS.get(method) if isinstance(method, str) else None
    if cls is None or not cls.has_factor or not isinstance(start, int) or not isinstance(target, int):
        return
    if target < start:
        why = ("the scaled model would cover fewer positions than it starts from" if factor_given
               else f"the default factor {target}/{start} = {target / start:.4g} is < 1")
        start_field = (target_field[:-len("max_seq_len")] if target_field.endswith("max_seq_len") else "") \
            + "original_max_seq_len"
        raise ValueError(f"{target_field}={target} is shorter than the {start} positions the scaling starts from: "
                         f"{why}; give {target_field} >= {start} (the target length), or {start_field}=<the length "
                         f"the model was pre-trained at> where {start} is not that (a config.json's "
                         "max_position_embeddings can say more: the base Qwen2.5-7B's 131072 for 32768)")
    if target == start and not factor_given and (method, target) not in _SAID_UNSCALED:
        # a torchtune builder's max_seq_len written as the target: the RoPE stayed unscaled without a word. Said
        # once a process (under a launcher on rank 0 alone: every process builds the model): the config check names
        # the config's keys, the build (rope_scaled) then says nothing more
        _SAID_UNSCALED.add((method, target))
        if launched_rank() == 0:
            logger.warning("%s=%d is the %d positions the scaling starts from: %s's default factor %d/%d = 1 leaves "
                           "the RoPE unscaled; start from the pre-trained length (the inner model's max_seq_len, or "
                           "original_max_seq_len), or give a factor", target_field, target, start, method, target,
                           start)


def scaling_start(model: nn.Module, original_max_seq_len: Optional[int] = None) -> Optional[int]:
    """The length :func:`apply_rope_scaling` scales ``model`` from: ``original_max_seq_len``, else the one an
    earlier scaling (a folder's own) started from, else the model's ``max_seq_len`` (which
    :func:`_refuse_unseen_start` refuses first where ``hf_decoder`` built the model past its checkpoint's
    positions)."""
    if original_max_seq_len is not None:
        return original_max_seq_len
    previous = getattr(model, "rope_scaling", None) or {}
    if previous.get("original_max_seq_len"):
        return previous["original_max_seq_len"]
    return getattr(model, "max_seq_len", None)


def _refuse_unseen_start(model: nn.Module, method: str, max_seq_len: int, caller: str) -> None:
    unseen = getattr(model, UNSEEN_START_ATTR, None)
    if unseen is None or (getattr(model, "rope_scaling", None) or {}).get("original_max_seq_len"):
        return
    raise scaling_start_refusal(method, unseen["max_seq_len"], max_seq_len, unseen["trained"],
                                start_field=unseen["field"], target_field=f"{caller}'s max_seq_len",
                                other_start=f"pass original_max_seq_len to {caller}", where=f"under {caller}")


# the keys of a scaling spec that say where it sits (the model's base, head size, pairing, lengths), not how it scales
CONTEXT_KEYS = ("method", "base", "max_seq_len", "head_dim", "layout", "original_max_seq_len")


def kept_learned_settings(model: nn.Module, method: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """The settings of ``model``'s own scaling that a new scaling by ``method`` keeps where ``given`` (its
    keywords) does not set them: the method's rule (:meth:`~torchtune_longshort.rope.base.ScaledRoPE.
    kept_learned_settings`, which the evaluation's override asks too): where both are the same learned method (a
    CLEX-trained checkpoint scaled by CLEX again), those its learned parameters were trained with (CLEX's ``act``,
    ``param_factor``, ...), which the recipe then loads; {} otherwise. Said in one line: which are kept, and which
    ``given`` changes (a CLEX step trained with ``act: tanh``, continued under a node without ``act``, trained its
    ODE under silu without a word). Within :func:`learned_parameters_from` (a resumed run) the resumed step's
    settings are the ones weighed, and the line is said only where ``given`` changes one."""
    resumed = _LEARNED_FROM.get()
    previous = (resumed if resumed is not None else getattr(model, "rope_scaling", None)) or {}
    cls = ROPE_METHODS.get(method) if isinstance(method, str) else None
    if cls is None or not cls.learns_over(previous):
        return {}
    kept, changed = cls.kept_learned_settings(previous, given)
    if (changed or resumed is None) and launched_rank() == 0:  # every process builds the model: said once
        said = f"rope_scaled: {method} over the model's own {method} {cls.learned_settings_note(kept, changed)}"
        (logger.warning if changed else logger.info)(said)
    return kept


def _warn_replaced_scaling(model: nn.Module, old: nn.Module, method: str, max_seq_len: int,
                           original_max_seq_len: Optional[int]) -> None:
    """Say where :func:`apply_rope_scaling` replaces the model's own scaling: at fewer positions than it covered, or
    by another method (its parameters dropped, not composed; its learned ones, ``old``'s, not used). Under a launcher
    on rank 0 alone: every process builds the model."""
    if launched_rank() != 0:
        return
    previous = getattr(model, "rope_scaling", None) or {}
    covered = getattr(model, "max_seq_len", None)
    if previous and isinstance(covered, int) and max_seq_len < covered:  # e.g. a Llama-3.1 folder's 128k, "yarn 32k"
        logger.warning("apply_rope_scaling: the model's own %s scaling (%s positions) is replaced by %s at %d "
                       "positions, fewer than it covered", previous.get("method"), covered, method, max_seq_len)
    elif previous.get("method") not in (None, method):  # e.g. a Phi-3.5 folder's LongRoPE factors dropped for YaRN
        learned = sorted(n for n, _ in old.named_parameters(recurse=False))
        logger.warning("apply_rope_scaling: the model's own %s scaling is replaced by %s (from %s positions), not "
                       "composed with it: its parameters (%s) are dropped%s", previous.get("method"), method,
                       original_max_seq_len or previous.get("original_max_seq_len") or covered,
                       ", ".join(sorted(k for k in previous if k not in CONTEXT_KEYS)) or "none",
                       f", and its learned {', '.join(learned)} (a checkpoint's longshort_rope/rope_params.safetensors)"
                       f" are not used (method {previous.get('method')!r} loads them)" if learned else "")


def apply_rope_scaling(
    model: nn.Module,
    method: str,
    max_seq_len: int,
    *,
    original_max_seq_len: Optional[int] = None,
    base: Optional[float] = None,
    **method_kwargs,
) -> nn.Module:
    """Swap the RoPE of a torchtune decoder for ``method`` built for ``max_seq_len`` positions, in place.

    Args:
        model: a torchtune ``TransformerDecoder`` whose attentions carry a RoPE ``pos_embeddings`` (llama2,
            llama3, mistral, qwen2 builders and their LoRA/QLoRA forms). Call before ``setup_caches``.
        method: a key of ``torchtune_longshort.rope.ROPE_METHODS``.
        max_seq_len: target context length L'.
        original_max_seq_len: pre-trained context length L; default: the length recorded by an earlier
            ``apply_rope_scaling``, else the model's current ``max_seq_len`` (refused where ``hf_decoder`` built
            the model at a ``max_seq_len`` past its checkpoint's positions: the factor would start from there).
        base: pre-trained RoPE base; default: the current module's ``base``.
        **method_kwargs: the method's parameters. Defaults filled here: ``factor = L'/L`` for methods with a
            factor, ``original_max_seq_len = L`` where the method needs it, ``t_max = L' // L`` for CLEX.
            EABF: ``exempt_layers`` (default 2, the paper's; 0 scales all layers as the released patch does).

    Returns:
        ``model``, with ``model.rope_scaling`` = the method's spec (JSON-able dict).
    """
    check_rope_method(method)
    check_positive_int("max_seq_len", max_seq_len)
    attentions = rope_attention_layers(model)
    for _, attn in attentions:
        if getattr(attn, "kv_cache", None) is not None:
            raise ValueError(
                "apply_rope_scaling: the model's KV caches are already set up for the old length; "
                "apply the scaling first, then call model.setup_caches(...)"
            )
    old = attentions[0][1].pos_embeddings
    head_dim = old.dim
    if base is None:
        base = old.base
    _warn_replaced_scaling(model, old, method, max_seq_len, original_max_seq_len)
    if original_max_seq_len is None:
        _refuse_unseen_start(model, method, max_seq_len, "apply_rope_scaling")
        original_max_seq_len = scaling_start(model)
    if original_max_seq_len is None:
        raise ValueError("original_max_seq_len could not be inferred from the model: pass it explicitly")
    check_positive_int("original_max_seq_len", original_max_seq_len)

    kwargs = ROPE_METHODS[method].default_kwargs(max_seq_len, original_max_seq_len, method_kwargs)
    kwargs.setdefault("layout", _layout_of(old))

    with torch.device(_module_device(old)):
        rope = build_rope(method, head_dim=head_dim, max_seq_len=max_seq_len, base=base, **kwargs)
    rope.train(model.training)  # a fresh module is in training mode; CLEX's behaviour depends on it

    _remove_hooks(model)
    model.__dict__.pop(UNSEEN_START_ATTR, None)  # the scaling now records its start (model.rope_scaling)
    for _, attn in attentions:
        attn.pos_embeddings = rope
        attn.max_seq_len = max_seq_len
    model.max_seq_len = max_seq_len
    if hasattr(rope, "query_scale"):
        _install_query_scale(model, rope, attentions)
    if hasattr(rope, "prepare"):  # a method that fixes its state once per forward (CLEX's t and positions)
        _install_per_forward(model, rope)
    model.rope_scaling = {
        **rope.spec(),
        "head_dim": head_dim,
        "layout": rope.layout,
        "original_max_seq_len": kwargs.get("original_max_seq_len", original_max_seq_len),
    }
    return model


def rope_scaled(model: Any, method: str, max_seq_len: int, **kwargs) -> nn.Module:
    """YAML-friendly wrapper: build ``model`` if it is a config node, then :func:`apply_rope_scaling`.

    torchtune 0.6.1's ``config.instantiate`` does not build nested ``_component_`` nodes: it hands them over as
    dicts. This function accepts an ``nn.Module`` or such a dict/DictConfig and instantiates it with torchtune's
    own ``config.instantiate``, so a config reads::

        model:
          _component_: torchtune_longshort.models.rope_scaled
          method: yarn
          max_seq_len: 16384
          model:
            _component_: torchtune.models.mistral.mistral_7b
    """
    if not isinstance(model, nn.Module):
        from omegaconf import DictConfig, OmegaConf
        from torchtune import config as tt_config

        if isinstance(model, dict):
            model = OmegaConf.create(model)
        if not isinstance(model, DictConfig) or "_component_" not in model:
            raise ValueError(
                f"rope_scaled: model={model!r} is neither an nn.Module nor a config node with a _component_ field"
            )
        model = tt_config.instantiate(model)
    kwargs = {**kwargs, **kept_learned_settings(model, method, kwargs)}  # kept: only where kwargs give none
    if kwargs.get("original_max_seq_len") is None:
        _refuse_unseen_start(model, method, max_seq_len, "rope_scaled")
    check_scaling_target(method, max_seq_len, scaling_start(model, kwargs.get("original_max_seq_len")),
                         kwargs.get("factor") is not None, "max_seq_len")
    return apply_rope_scaling(model, method, max_seq_len, **kwargs)

