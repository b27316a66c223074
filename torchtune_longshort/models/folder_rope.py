"""The RoPE a model of a checkpoint folder is built with: the folder's own scaling or an override of it
(:func:`effective_rope_spec`), whether the folder's learned RoPE parameters go with it (:func:`keeps_learned_rope`),
the pre-trained RoPE a scaling starts from (:func:`pretrained_rope`), and where a later scaling over the built model
starts (:func:`scaling_start_of`, :func:`scaling_start_past_checkpoint`). :mod:`.hf_model` builds with them; the
checkpoint opener, the RoPE override check, the eval limits and the recipe config's RoPE node ask them too."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

from torchtune_longshort.models.hf_checkpoint import CheckpointFolder, PathLike
from torchtune_longshort.models.hf_rope import native_positions
from torchtune_longshort.models.rope_scaling import CONTEXT_KEYS
from torchtune_longshort.rope import ROPE_METHODS

Folder = Union[PathLike, CheckpointFolder]


def effective_rope_spec(folder: CheckpointFolder,
                        rope: Optional[Union[str, Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """The RoPE spec a model of ``folder`` is built with under the override ``rope`` (None: the folder's own):
    what :func:`build_decoder` builds, what a run records. An override scales the folder's pre-trained RoPE, so it
    records the length (and, where the folder's scaling holds it, the base) it starts from
    (:func:`pretrained_rope`); one of the step's learned method (CLEX over a CLEX step) keeps where the step sits
    and the settings its learned parameters were trained with that the override does not give (the method's rule,
    :meth:`~torchtune_longshort.rope.base.ScaledRoPE.kept_learned_settings`, which ``rope_scaled`` asks too)."""
    if isinstance(rope, str):
        rope = {"method": rope}
    if rope is not None and not (isinstance(rope, dict) and "method" in rope):
        raise ValueError(f"rope={rope!r} is not accepted: expected a method name, a spec dict with 'method', or None")
    if rope is None:
        return folder.rope_spec
    if not keeps_learned_rope(folder, rope):
        base, original = pretrained_rope(folder)
        start = {"original_max_seq_len": original, **({"base": base} if base is not None else {})}
        return {**rope, **{k: v for k, v in start.items() if rope.get(k) is None}}
    own = folder.rope_spec
    kept, _ = ROPE_METHODS[rope["method"]].kept_learned_settings(own, rope)
    # the length the step targeted is the override's to set (its t_max, its run's length)
    context = {k: own[k] for k in CONTEXT_KEYS if k in own and k not in ("method", "max_seq_len")}
    return {**context, **rope, **kept}


def keeps_learned_rope(folder: CheckpointFolder, rope: Optional[Union[str, Dict[str, Any]]]) -> bool:
    """Whether a model built from ``folder`` with the override ``rope`` (None: the folder's own scaling) takes the
    folder's learned RoPE parameters (CLEX's ODE): without an override, or with one of the same learned method (a
    CLEX step evaluated at another ``t_max``); an override of another method has none to take."""
    if rope is None:
        return True
    cls = ROPE_METHODS.get(rope if isinstance(rope, str) else rope.get("method"))
    return cls is not None and cls.learns_over(folder.rope_spec)


def pretrained_rope(folder: CheckpointFolder) -> Tuple[Optional[float], int]:
    """The base (None: config.json's ``rope_theta``) and length of the folder's pre-trained RoPE, which ``plain_rope``
    builds and a ``rope`` override scales from: its scaling spec's, where it records them (a folder written here
    with NTK or ABF holds the scaled base in ``rope_theta`` and every one the scaled length in
    ``max_position_embeddings``; a hub config's ``original_max_position_embeddings``), else config.json's."""
    own = folder.rope_spec or {}
    return own.get("base"), int(own.get("original_max_seq_len") or native_positions(folder.config))


def scaling_start_of(folder: Folder, max_seq_len: Optional[int] = None, plain_rope: bool = False) -> Tuple[int, int]:
    """``(start, trained)`` of ``rope_scaled`` / ``apply_rope_scaling`` over ``hf_decoder(folder, max_seq_len,
    plain_rope)`` with no ``original_max_seq_len``: the length the scaling starts from, and the positions the
    checkpoint's RoPE was trained at. A folder's own scaling (``plain_rope`` off) records its pre-trained length, the
    start whatever ``max_seq_len`` it was built at; otherwise the start is the built model's ``max_seq_len``."""
    folder = CheckpointFolder.open(folder)
    _, plain_len = pretrained_rope(folder)
    if folder.rope_spec is not None and not plain_rope:
        return plain_len, folder.usable_length
    return (max_seq_len or plain_len), plain_len


def scaling_start_past_checkpoint(folder: Folder, max_seq_len: Optional[int] = None,
                                  plain_rope: bool = False) -> Optional[int]:
    """The positions ``folder``'s checkpoint was trained at where ``hf_decoder(folder, max_seq_len, plain_rope)``
    would start a later scaling past them (``rope_scaled`` takes its ``max_seq_len`` as the start: at the target,
    factor 1, no scaling); None where it would not. The config check and :func:`hf_decoder` both ask this."""
    start, trained = scaling_start_of(folder, max_seq_len, plain_rope)
    return trained if start > trained else None
