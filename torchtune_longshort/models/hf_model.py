"""A checkpoint folder as a torchtune decoder: built by its model family with its RoPE scaling, and loaded.

:func:`hf_decoder` is the config component (the model of any family in the table, by YAML alone);
:func:`load_hf_checkpoint` builds and loads in one call (evaluation, the misalignment CLI, tests). Both take a
:class:`~torchtune_longshort.models.hf_checkpoint.CheckpointFolder` or a path (opened once).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

import torch
from torch import nn

from torchtune_longshort.models.families import lora_kwargs
from torchtune_longshort.models.hf_checkpoint import ROPE_SIDE_FILE, CheckpointFolder, PathLike
from torchtune_longshort.models.hf_rope import SPEC_CONTEXT_KEYS, native_positions
from torchtune_longshort.models.rope_scaling import apply_rope_scaling

Folder = Union[PathLike, CheckpointFolder]


def _rope_spec(folder: CheckpointFolder, rope: Optional[Union[str, Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    if isinstance(rope, str):
        rope = {"method": rope}
    if rope is not None and not (isinstance(rope, dict) and "method" in rope):
        raise ValueError(f"rope={rope!r} is not accepted: expected a method name, a spec dict with 'method', or None")
    return folder.rope_spec if rope is None else dict(rope)


def build_decoder(
    folder: Folder,
    *,
    max_seq_len: Optional[int] = None,
    rope: Optional[Union[str, Dict[str, Any]]] = None,
    plain_rope: bool = False,
    lora: Optional[Dict[str, Any]] = None,
) -> nn.Module:
    """The folder's torchtune decoder (weights uninitialised, as a builder returns it) with its RoPE scaling.

    Args:
        folder: a checkpoint folder (opened once).
        max_seq_len: target context length; default the spec's ``max_seq_len``, else ``max_position_embeddings``.
        rope: the scaling to apply instead of the folder's own: a spec dict (``{"method": "yarn", "factor": 4}``) or
            a method name (its defaults, factor ``max_seq_len / max_position_embeddings``); None: the folder's.
        plain_rope: ignore every scaling (the pre-trained RoPE at ``max_position_embeddings`` or ``max_seq_len``).
        lora: torchtune's LoRA keywords (``lora_rank``, ``lora_alpha``, ``lora_attn_modules``, ...) or None.
    """
    folder = CheckpointFolder.open(folder)
    plain_len = native_positions(folder.config)
    spec = None if plain_rope else _rope_spec(folder, rope)
    if spec is None:
        return folder.family.build(folder.config, max_seq_len or plain_len, lora)
    target = max_seq_len or spec.get("max_seq_len") or plain_len
    # The stored pre-trained length and base, not the (possibly scaled) ones in config.json.
    original = spec.get("original_max_seq_len")
    if original is None and rope is not None:
        original = plain_len
    model = folder.family.build(folder.config, original or target, lora)
    base = spec.get("base") or model.layers[0].attn.pos_embeddings.base
    kwargs = {k: v for k, v in spec.items() if k not in SPEC_CONTEXT_KEYS}
    return apply_rope_scaling(model, spec["method"], target, original_max_seq_len=original, base=base, **kwargs)


def load_weights_into(model: nn.Module, folder: CheckpointFolder, *, learned_rope: bool = True) -> None:
    """Load the folder's weights (and, with ``learned_rope``, its learned RoPE parameters) into ``model``;
    refuses a model the weights do not fit, naming the folder and its family."""
    missing, unexpected = model.load_state_dict(folder.tune_state_dict(), strict=False)
    # RoPE caches are buffers that checkpoints do not hold; LoRA adapters are not in a base checkpoint.
    missing = [k for k in missing if "pos_embeddings" not in k and "lora_" not in k and "magnitude" not in k]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {str(folder.path)!r} (family {folder.family.name!r}) does not fit the model: "
            f"missing={missing[:5]} unexpected={unexpected[:5]}"
        )
    learned = folder.rope_parameters() if learned_rope else {}
    if learned:
        rope_module = model.layers[0].attn.pos_embeddings
        try:
            rope_module.load_state_dict(learned, strict=True)
        except RuntimeError as e:
            method = (folder.rope_spec or {}).get("method")
            raise ValueError(f"checkpoint {str(folder.path)!r}: {ROPE_SIDE_FILE} does not fit RoPE method "
                             f"{method!r} of config.json: {e}") from None


def load_hf_checkpoint(
    checkpoint_dir: Folder,
    rope: Optional[Union[str, Dict[str, Any]]] = None,
    max_seq_len: Optional[int] = None,
    dtype: torch.dtype = torch.float32,
    device: Union[str, torch.device] = "cpu",
    plain_rope: bool = False,
) -> nn.Module:
    """Load a checkpoint folder of any family in the table into a torchtune decoder, with RoPE scaling.

    Args:
        checkpoint_dir: a checkpoint folder (see :mod:`~torchtune_longshort.models.hf_checkpoint`).
        rope: the scaling to apply: a spec dict (``{"method": "yarn", "factor": 4, ...}``), a method name (its
            defaults, e.g. factor L'/L), or None to take it from config.json (our ``longshort_rope`` key, else the
            transformers ``rope_scaling``/``rope_parameters``); no scaling there gives plain RoPE.
        max_seq_len: target context length; default the spec's ``max_seq_len``, else ``max_position_embeddings``.
        dtype, device: of the returned model (RoPE caches stay float32).
        plain_rope: ignore the folder's scaling (the pre-trained RoPE).

    Returns:
        a torchtune ``TransformerDecoder`` in eval mode; learned RoPE parameters (CLEX) come from the side file.
    """
    folder = CheckpointFolder.open(checkpoint_dir)
    with torch.device("meta"):
        model = build_decoder(folder, max_seq_len=max_seq_len, rope=rope, plain_rope=plain_rope)
    model = model.to_empty(device=device)
    for m in model.modules():  # what no checkpoint holds: RoPE caches, and a learned RoPE's initial parameters
        if hasattr(m, "rope_init"):
            m.reset_parameters() if hasattr(m, "reset_parameters") else m.rope_init()
    load_weights_into(model, folder, learned_rope=rope is None and not plain_rope)
    model = model.to(dtype=dtype)
    for rope_module in {id(m.pos_embeddings): m.pos_embeddings for m in model.modules()
                        if getattr(m, "pos_embeddings", None) is not None}.values():
        rope_module.float()  # RoPE caches and learned RoPE parameters (CLEX) stay float32
    return model.to(device=device).eval()


def hf_decoder(
    checkpoint_dir: str,
    max_seq_len: Optional[int] = None,
    plain_rope: bool = False,
    lora_attn_modules: Optional[list] = None,
    apply_lora_to_mlp: bool = False,
    apply_lora_to_output: bool = False,
    lora_rank: Optional[int] = None,
    lora_alpha: Optional[float] = None,
    lora_dropout: float = 0.0,
    use_dora: bool = False,
    quantize_base: bool = False,
) -> nn.Module:
    """Config component: the decoder of a checkpoint folder's family, dimensions and RoPE (scaling included) read
    from its ``config.json``; the recipe loads the weights. LoRA / QLoRA by torchtune's keywords::

        model:
          _component_: torchtune_longshort.models.rope_scaled      # optional: extend the context
          method: yarn
          max_seq_len: 32768
          model:
            _component_: torchtune_longshort.models.hf_decoder
            checkpoint_dir: ${checkpoint_dir}
            lora_rank: 8           # optional (LoRA)
            lora_alpha: 16
    """
    lora = lora_kwargs(lora_attn_modules=lora_attn_modules, apply_lora_to_mlp=apply_lora_to_mlp,
                       apply_lora_to_output=apply_lora_to_output, lora_rank=lora_rank, lora_alpha=lora_alpha,
                       lora_dropout=lora_dropout, use_dora=use_dora, quantize_base=quantize_base)
    return build_decoder(checkpoint_dir, max_seq_len=max_seq_len, plain_rope=plain_rope, lora=lora)
