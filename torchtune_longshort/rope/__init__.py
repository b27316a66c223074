"""RoPE scaling methods (one module per method) and the registries that map a config name to one.

``ROPE_METHODS``: name -> class, each a drop-in for torchtune's ``RotaryPositionalEmbeddings``
(``forward(x, *, input_pos=None)``, ``rope_init()``, ``reset_parameters()``), built with
:func:`build_rope`. ``POSITION_SAMPLERS``: name -> class with ``sample(batch_size, seq_len, generator)``
returning ``input_pos`` [b, s]; these are a *separate* registry because they compose with every frequency
method (``random_pos``, ``pose``), built with :func:`build_position_sampler`.

Attention-level parts (EABF's query factor, CLEX's per-forward draw) are installed on a model by
``torchtune_longshort.models.apply_rope_scaling``.

:func:`check_rope_method` is the one check of a method name: every place that takes one (the builders here and in
``models``, a checkpoint's ``longshort_rope`` entry, the recipe and study configs) asks it, so a wrong name gets the
same one-line message everywhere.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Dict, List, Optional, Type

from torch import nn

from torchtune_longshort.rope.abf import ABFRoPE, EABFRoPE, eabf_query_scale
from torchtune_longshort.rope.base import DefaultRoPE, ScaledRoPE, rope_modules, rotate
from torchtune_longshort.rope.checks import check_head_dim
from torchtune_longshort.rope.clex import CLEXRoPE
from torchtune_longshort.rope.linear import LinearRoPE
from torchtune_longshort.rope.llama3 import Llama3RoPE
from torchtune_longshort.rope.longrope import LongRoPE
from torchtune_longshort.rope.ntk import DynamicNTKRoPE, NTKRoPE
from torchtune_longshort.rope.ntk_by_parts import NTKByPartsRoPE
from torchtune_longshort.rope.registry import DottedRegistry, is_dotted_path
from torchtune_longshort.rope.samplers import PoSEPositions, RandomPositions
from torchtune_longshort.rope.yarn import YaRNRoPE, yarn_mscale

# A method of one's own is named by its class's dotted path (``my_module.MyRoPE``, a ScaledRoPE subclass), imported
# on first lookup in each process that asks (the config check, each rank, the eval reading a checkpoint's spec).
ROPE_METHODS: Dict[str, Type[ScaledRoPE]] = DottedRegistry({
    "default": DefaultRoPE,
    "linear": LinearRoPE,
    "ntk": NTKRoPE,
    "dynamic_ntk": DynamicNTKRoPE,
    "yarn": YaRNRoPE,
    "abf": ABFRoPE,
    "eabf": EABFRoPE,
    "clex": CLEXRoPE,
    "llama3": Llama3RoPE,
    "ntk_by_parts": NTKByPartsRoPE,
    "longrope": LongRoPE,
}, base=ScaledRoPE, what="RoPE method", name_attr="method")

OWN_METHOD_HINT = ("or the dotted path of a ScaledRoPE subclass of your own, e.g. my_module.MyRoPE (importable: "
                   "installed, or its folder on PYTHONPATH)")

# The method of the Llama-2 builders when none is named (Position Interpolation, as the paper's Llama-2 runs).
DEFAULT_ROPE_METHOD = "linear"

POSITION_SAMPLERS = {
    "random_pos": RandomPositions,
    "pose": PoSEPositions,
}


def check_rope_method(method: Any, where: str = "method") -> str:
    """``method`` when it is a key of ``ROPE_METHODS`` or the dotted path of a ``ScaledRoPE`` subclass (imported and
    kept); else ``ValueError`` in one line naming ``where`` (the field that holds it), the value, the nearest method
    name (or that it is a position-id sampler, or why its path is no method) and the accepted names."""
    if isinstance(method, str) and dict.__contains__(ROPE_METHODS, method):
        return method
    if is_dotted_path(method):
        try:
            ROPE_METHODS.load(method)
        except ValueError as e:
            raise ValueError(f"{where}={method!r} is not a RoPE method: {e}") from None
        return method
    if isinstance(method, str) and method in POSITION_SAMPLERS:
        hint = (f" (a position-id sampler, not a frequency method: build it with build_position_sampler({method!r}, "
                "...) and pass its positions as input_pos)")
    else:
        near = difflib.get_close_matches(str(method), list(ROPE_METHODS), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ValueError(f"{where}={method!r} is not a RoPE method{hint}: expected one of {sorted(ROPE_METHODS)} "
                     f"(torchtune_longshort.rope.ROPE_METHODS), {OWN_METHOD_HINT}")


def method_parameters(method: str) -> Optional[List[str]]:
    """The keywords RoPE method ``method``'s class takes besides what every method gets (head size, positions, base),
    sorted; None when it takes any (``**kwargs``). The recipe's config check and the eval model's ``rope_<param>=``
    check ask it, before anything is built."""
    params = inspect.signature(ROPE_METHODS[method].__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return sorted(n for n in params if n not in ("self", "dim", "max_seq_len", "base"))


def build_rope(method: str, *, head_dim: int, max_seq_len: int, base: Optional[float] = None,
               **method_kwargs) -> nn.Module:
    """Build the RoPE module of ``method`` for ``max_seq_len`` positions.

    Args:
        method: a key of ``ROPE_METHODS``.
        head_dim: per-head dimension (positive, even).
        max_seq_len: target context length (the cache covers positions 0..max_seq_len-1).
        base: the pre-trained RoPE base; None: the method's own default (10000; Llama-3's 500000).
        **method_kwargs: the method's own parameters (``factor``, ``original_max_seq_len``, ``alpha``/``beta``,
            ``new_base``, ``t_max``, ``layout``, ...; see each class).

    Returns:
        an ``nn.Module`` usable as torchtune's ``pos_embeddings``.
    """
    check_rope_method(method)
    check_head_dim(head_dim)
    cls = ROPE_METHODS[method]
    accepted = method_parameters(method)
    unknown = [k for k in method_kwargs if accepted is not None and k not in accepted]
    if unknown:  # Python's "unexpected keyword argument 'alhpa'" named neither the one meant nor the list
        near = difflib.get_close_matches(unknown[0], accepted, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise TypeError(f"rope method {method!r}: {unknown[0]}={method_kwargs[unknown[0]]!r} is not one of its "
                        f"parameters{hint}: it takes {accepted}")
    try:
        return cls(head_dim, max_seq_len, **({} if base is None else {"base": base}), **method_kwargs)
    except TypeError as e:  # unknown / missing keyword: name the method
        raise TypeError(f"rope method {method!r}: {e}") from None


def has_learned_parameters(method: Any) -> bool:
    """Whether RoPE method ``method`` trains parameters of its own (CLEX's ODE): its class says so; an unknown name
    or None, no."""
    cls = ROPE_METHODS.get(method) if isinstance(method, str) else None
    return bool(cls is not None and cls.has_learned_parameters)


def build_position_sampler(name: str, **kwargs):
    """Build a position-id sampler (``random_pos``: ``max_position``; ``pose``: ``target_len``, ``num_chunks``)."""
    if name not in POSITION_SAMPLERS:
        raise ValueError(f"unknown position sampler {name!r}: expected one of {sorted(POSITION_SAMPLERS)}")
    return POSITION_SAMPLERS[name](**kwargs)


__all__ = [
    "ROPE_METHODS",
    "DEFAULT_ROPE_METHOD",
    "check_rope_method",
    "has_learned_parameters",
    "POSITION_SAMPLERS",
    "build_rope",
    "build_position_sampler",
    "ScaledRoPE",
    "DefaultRoPE",
    "LinearRoPE",
    "NTKRoPE",
    "DynamicNTKRoPE",
    "YaRNRoPE",
    "ABFRoPE",
    "EABFRoPE",
    "CLEXRoPE",
    "Llama3RoPE",
    "LongRoPE",
    "RandomPositions",
    "PoSEPositions",
    "eabf_query_scale",
    "yarn_mscale",
    "rotate",
    "rope_modules",
]
