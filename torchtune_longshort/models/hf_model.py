"""A model of the family table as a torchtune decoder: a checkpoint folder's (built by its family with its RoPE
scaling, and loaded), or random weights of a family with explicit dimensions.

:func:`hf_decoder` is the config component, the one every shipped config's ``model`` builds through (the model of
any family in the table, by YAML alone); :func:`load_hf_checkpoint` builds and loads in one call (evaluation, the
misalignment CLI, tests). Both take a :class:`~torchtune_longshort.models.hf_checkpoint.CheckpointFolder` or a path
(opened once). :func:`decoder_config` is the ``config.json`` of random weights: what :func:`hf_decoder` builds from
and what the recipe writes as ``step_0``."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Union

import torch
from torch import nn

from torchtune_longshort.devices import check_fits, require_device
from torchtune_longshort.models.families import check_family_beside, family_named
from torchtune_longshort.models.family_builders import UnsupportedModelError, with_rope_theta
from torchtune_longshort.models.folder_rope import (Folder, effective_rope_spec, keeps_learned_rope, pretrained_rope,
                                                    scaling_start_past_checkpoint)
from torchtune_longshort.models.hf_checkpoint import (
    ROPE_SIDE_FILE,
    CheckpointFolder,
    own_tensors,
    shape_mismatch,
)
from torchtune_longshort.models.hf_rope import SPEC_CONTEXT_KEYS, native_positions
from torchtune_longshort.models.lora_settings import check_lora_settings
from torchtune_longshort.models.rope_scaling import UNSEEN_START_ATTR, apply_rope_scaling
from torchtune_longshort.rope import ROPE_METHODS, check_rope_method, has_learned_parameters
from torchtune_longshort.rope.base import rope_table_bytes
from torchtune_longshort.rope.checkpoint_code import MODEL_FIX, checkpoint_code, component_code
from torchtune_longshort.models.s2_attn import enable_s2_attn
from torchtune_longshort.models.scratch_config import DIMENSION_KEYS

def _target_length(spec: Dict[str, Any], rope: Any, max_seq_len: Optional[int], plain_len: int) -> int:
    """The length the scaling builds for: ``max_seq_len``, else the spec's, else (an explicit ``rope`` with a factor)
    factor x the pre-trained length, else the pre-trained length. An explicit ``rope`` of a method with a factor but
    neither a factor nor a length would scale nothing (factor L'/L = 1): refused."""
    if max_seq_len or spec.get("max_seq_len"):
        return max_seq_len or int(spec["max_seq_len"])
    if rope is None:
        return plain_len
    original = spec.get("original_max_seq_len") or plain_len
    factor = spec.get("factor")
    if factor is not None and (not isinstance(factor, (int, float)) or isinstance(factor, bool)):
        raise ValueError(f"rope: factor={factor!r} is not a number: pass a number >= 1")
    if factor is not None:
        return max(int(original), int(round(factor * original)))
    method = ROPE_METHODS[check_rope_method(spec["method"])]
    if method.scale_parameter is not None and method.scale_parameter in spec:  # CLEX's t_max: L * t_max
        return max(int(original), method.covered_length(spec, int(original)))
    given = {"method": rope} if isinstance(rope, str) else rope  # the override as typed: spec adds its start
    if set(given) == {"method"} and method.has_factor:
        raise ValueError(f"rope={rope!r} with no max_seq_len and no factor scales nothing (its default factor "
                         f"max_seq_len / {original} pre-trained positions is 1): pass max_seq_len=<the target length>, "
                         "or a factor in the spec")
    return plain_len


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
        max_seq_len: target context length; default the spec's ``max_seq_len``, else (a ``rope`` given with a
            factor) factor x the pre-trained length, else ``max_position_embeddings``.
        rope: the scaling to apply instead of the folder's own: a spec dict (``{"method": "yarn", "factor": 4}``) or
            a method name (its defaults, factor ``max_seq_len`` / the pre-trained length: a method with a factor
            needs ``max_seq_len`` then); None: the folder's. It scales the pre-trained RoPE, not the folder's.
        plain_rope: ignore every scaling: the pre-trained RoPE (its base and length, as the scaling spec records
            them, else config.json's ``rope_theta`` and ``max_position_embeddings``), or at ``max_seq_len``.
        lora: torchtune's LoRA keywords (``lora_rank``, ``lora_alpha``, ``lora_attn_modules``, ...) or None.
    """
    folder = CheckpointFolder.open(folder)
    if max_seq_len is not None and (not isinstance(max_seq_len, int) or isinstance(max_seq_len, bool)
                                    or max_seq_len < 1):
        raise ValueError(f"max_seq_len={max_seq_len!r} must be an int >= 1 (positions), or None: the spec's or the "
                         "checkpoint's")
    if plain_rope and rope is not None:
        raise ValueError(f"rope={rope!r} and plain_rope=True ask for two things: pass one (plain_rope ignores every "
                         "scaling)")
    base0, plain_len = pretrained_rope(folder)
    spec = None if plain_rope else effective_rope_spec(folder, rope)
    if spec is None:
        config = folder.config if base0 is None else with_rope_theta(folder.config, base0)
        return _folder_decoder(folder, config, max_seq_len or plain_len, lora)
    target = _target_length(spec, rope, max_seq_len, plain_len)
    if rope is None and has_learned_parameters(spec["method"]) and spec.get("max_seq_len"):
        # a learned RoPE (CLEX) is the module it was trained as, over its positions; a shorter run picks its t from
        # the length (the method's inference rule), so building it for fewer positions would only refuse
        target = max(target, int(spec["max_seq_len"]))
    elif rope is not None and has_learned_parameters(spec["method"]) and "max_seq_len" not in spec:
        # the same for an override's reach (rope=clex,rope_t_max=2 on a run of 256 of 512 positions: L * t_max)
        reach = ROPE_METHODS[spec["method"]].covered_length(spec, int(spec.get("original_max_seq_len") or plain_len))
        target = max(target, reach or 0)
    # The stored pre-trained length and base, not the (possibly scaled) ones in config.json.
    original = spec.get("original_max_seq_len")
    if original is None and rope is not None:
        original = plain_len
    model = _folder_decoder(folder, folder.config, original or target, lora)
    base = spec.get("base") or base0 or model.layers[0].attn.pos_embeddings.base
    kwargs = {k: v for k, v in spec.items() if k not in SPEC_CONTEXT_KEYS}
    return apply_rope_scaling(model, spec["method"], target, original_max_seq_len=original, base=base, **kwargs)


def load_weights_into(model: nn.Module, folder: CheckpointFolder, *, learned_rope: bool = True) -> None:
    """Load the folder's weights (and, with ``learned_rope``, its learned RoPE parameters) into ``model``;
    refuses a model the weights do not fit, naming the folder and its family."""
    sd = folder.tune_state_dict()
    wrong = shape_mismatch(own_tensors(model), sd)
    if wrong is not None:  # the model is built from the folder's config.json
        raise ValueError(folder.not_its_weights(wrong))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    # RoPE caches are buffers that checkpoints do not hold; LoRA adapters are not in a base checkpoint.
    missing = [k for k in missing if "pos_embeddings" not in k and "lora_" not in k and "magnitude" not in k]
    if missing or unexpected:
        # the model is built from this folder's config.json: a layer count or tied output it does not describe
        # named neither the key nor the fix
        raise ValueError(folder.not_its_weights(f"missing={missing[:5]} unexpected={unexpected[:5]}"))
    learned = folder.rope_parameters() if learned_rope else {}
    if learned:
        rope_module = model.layers[0].attn.pos_embeddings
        try:
            rope_module.load_state_dict(learned, strict=True)
        except RuntimeError as e:
            method = (folder.rope_spec or {}).get("method")
            raise ValueError(f"checkpoint {str(folder.path)!r}: {ROPE_SIDE_FILE} does not fit RoPE method "
                             f"{method!r} of config.json: {e}") from None


def _check_fits_on(model: nn.Module, device: Union[str, torch.device], folder: CheckpointFolder,
                   length_field: str) -> None:
    """Refuse a meta-built ``model`` whose weights and RoPE tables (and the building of one table) ``device`` cannot
    hold, before they are allocated (:func:`~torchtune_longshort.devices.check_fits`); the fix names the caller's
    ``length_field``."""
    ropes = {id(m.pos_embeddings): m.pos_embeddings for m in model.modules()
             if getattr(m, "pos_embeddings", None) is not None}.values()
    positions = max((int(getattr(r, "max_seq_len", 0) or 0) for r in ropes), default=0)
    head_dim = max((int(getattr(r, "dim", 0) or 0) for r in ropes), default=0)
    held = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    check_fits(held + rope_table_bytes(positions, head_dim), device,
               f"checkpoint {str(folder.path)!r} with RoPE tables for {positions:,} positions",
               f"ask for fewer positions ({length_field})")


def check_checkpoint_fits(checkpoint_dir: Folder, rope: Optional[Union[str, Dict[str, Any]]] = None,
                          max_seq_len: Optional[int] = None, device: Union[str, torch.device] = "cpu",
                          length_field: str = "max_seq_len") -> None:
    """Refuse, as :func:`load_hf_checkpoint` would, a checkpoint whose weights and RoPE tables at ``max_seq_len``
    ``device`` cannot hold: the model is built on the meta device only (nothing allocated, no weight read)."""
    folder = CheckpointFolder.open(checkpoint_dir)
    with torch.device("meta"):
        model = build_decoder(folder, max_seq_len=max_seq_len, rope=rope)
    _check_fits_on(model, device, folder, length_field)


def load_hf_checkpoint(
    checkpoint_dir: Folder,
    rope: Optional[Union[str, Dict[str, Any]]] = None,
    max_seq_len: Optional[int] = None,
    dtype: torch.dtype = torch.float32,
    device: Union[str, torch.device] = "cpu",
    plain_rope: bool = False,
    length_field: str = "max_seq_len",
    trust_remote_code: bool = False,
) -> nn.Module:
    """Load a checkpoint folder of any family in the table into a torchtune decoder, with RoPE scaling.

    Args:
        checkpoint_dir: a checkpoint folder (see :mod:`~torchtune_longshort.models.hf_checkpoint`).
        rope: the scaling to apply: a spec dict (``{"method": "yarn", "factor": 4, ...}``), a method name (its
            defaults, e.g. factor L'/L), or None to take it from config.json (our ``longshort_rope`` key, else the
            transformers ``rope_scaling``/``rope_parameters``); no scaling there gives plain RoPE.
        max_seq_len: target context length; default the spec's ``max_seq_len``, else (a ``rope`` given with a
            factor) factor x the pre-trained length, else ``max_position_embeddings``.
        dtype, device: of the returned model (RoPE caches stay float32).
        plain_rope: ignore the folder's scaling (the pre-trained RoPE).
        length_field: what the caller calls ``max_seq_len`` (an argument of its command), named in the refusal of a
            length whose RoPE tables this device cannot hold.
        trust_remote_code: import the code of one's own a folder's config.json names (``longshort_family``,
            ``longshort_rope.method``: a dotted path outside this package), as transformers' keyword of that name
            does for ``auto_map``; without it such a folder is refused before the module is imported.

    Returns:
        a torchtune ``TransformerDecoder`` in eval mode; learned RoPE parameters (CLEX) come from the side file.
    """
    with checkpoint_code(trust_remote_code, "trust_remote_code=True to load_hf_checkpoint"):
        folder = CheckpointFolder.open(checkpoint_dir)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype={dtype!r} is not a torch.dtype: pass torch.float32, torch.bfloat16 or torch.float16")
    require_device(str(device))
    with torch.device("meta"):
        model = build_decoder(folder, max_seq_len=max_seq_len, rope=rope, plain_rope=plain_rope)
    _check_fits_on(model, device, folder, length_field)
    model = model.to_empty(device=device)
    for m in model.modules():  # what no checkpoint holds: RoPE caches, and a learned RoPE's initial parameters
        if hasattr(m, "rope_init"):
            m.reset_parameters() if hasattr(m, "reset_parameters") else m.rope_init()
    load_weights_into(model, folder, learned_rope=keeps_learned_rope(folder, rope) and not plain_rope)
    model = model.to(dtype=dtype)
    for rope_module in {id(m.pos_embeddings): m.pos_embeddings for m in model.modules()
                        if getattr(m, "pos_embeddings", None) is not None}.values():
        rope_module.float()  # RoPE caches and learned RoPE parameters (CLEX) stay float32
    return model.to(device=device).eval()


def lora_kwargs(**kwargs: Any) -> Optional[Dict[str, Any]]:
    """The LoRA keywords given (None when ``lora_rank`` is not set: full fine-tuning)."""
    check_lora_settings(kwargs)
    if kwargs.get("lora_rank") is None:
        return None
    return {k: v for k, v in kwargs.items() if v is not None}



def decoder_config(node: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``config.json`` of random weights that a model node gives: its ``family`` (a key of
    :data:`~torchtune_longshort.models.families.MODEL_FAMILIES`) writes it from the node's dimension keywords and
    ``max_seq_len``; other keys of the node are not read. :func:`hf_decoder` builds from it; the recipe writes it as
    ``step_0``'s ``config.json``."""
    if node.get("family") is None:
        raise ValueError(f"model: random weights are built from model.family and explicit dimensions, and this node "
                         f"gives no family (keys: {sorted(node)}); set model.family (e.g. llama) and the dimensions, "
                         "or start from a checkpoint folder (checkpointer.checkpoint_dir)")
    dims = {k: node[k] for k in (*DIMENSION_KEYS, "max_seq_len") if node.get(k) is not None}
    return family_named(node["family"]).config_from_dims(dims)


def _folder_decoder(folder: CheckpointFolder, config: Mapping[str, Any], max_seq_len: int,
                    lora: Optional[Dict[str, Any]]) -> nn.Module:
    """``folder``'s family's decoder; a config.json its torchtune builder cannot build is refused naming the folder
    (the builders know only the config)."""
    try:
        return folder.family.decoder(config, max_seq_len, lora)
    except UnsupportedModelError as e:
        raise UnsupportedModelError(f"checkpoint {str(folder.path)!r}: {e}") from None


def hf_decoder(
    checkpoint_dir: Optional[str] = None,
    max_seq_len: Optional[int] = None,
    plain_rope: bool = False,
    family: Optional[str] = None,
    vocab_size: Optional[int] = None,
    num_layers: Optional[int] = None,
    num_heads: Optional[int] = None,
    num_kv_heads: Optional[int] = None,
    embed_dim: Optional[int] = None,
    intermediate_dim: Optional[int] = None,
    norm_eps: Optional[float] = None,
    rope_base: Optional[float] = None,
    lora_attn_modules: Optional[list] = None,
    apply_lora_to_mlp: bool = False,
    apply_lora_to_output: bool = False,
    lora_rank: Optional[int] = None,
    lora_alpha: Optional[float] = None,
    lora_dropout: float = 0.0,
    use_dora: bool = False,
    quantize_base: bool = False,
    s2_attn: bool = False,
    s2_group_size: Optional[int] = None,
    s2_group_size_ratio: float = 0.25,
    trust_remote_code: Optional[bool] = None,
) -> nn.Module:
    """Config component: the decoder of a model family, built by the family table from a ``config.json``:

    * ``checkpoint_dir``: a checkpoint folder's, dimensions and RoPE (scaling included) read from its
      ``config.json`` (with ``family``: the dotted path of a family of one's own whose ``model_type`` it is, imported
      first); the recipe loads the weights;
    * ``family`` + torchtune's dimension keywords (``vocab_size``, ``num_layers``, ``num_heads``, ``num_kv_heads``,
      ``embed_dim``, ``intermediate_dim``, ``norm_eps``, ``rope_base``, ``max_seq_len``): random weights, built
      from the ``config.json`` :func:`decoder_config` writes (the recipe writes the same one as ``step_0``).

    LoRA / QLoRA by torchtune's keywords; ``s2_attn`` (LongLoRA's shifted sparse attention at training time, any
    family; group ``s2_group_size``, else ``s2_group_size_ratio`` of the length: see
    :func:`~torchtune_longshort.models.s2_attn.enable_s2_attn`). ``trust_remote_code``: as checkpoint_tokenizer's::

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
    dims = dict(vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
                embed_dim=embed_dim, intermediate_dim=intermediate_dim, norm_eps=norm_eps, rope_base=rope_base)
    check_decoder_source(dict(dims, checkpoint_dir=checkpoint_dir, family=family))
    if checkpoint_dir is not None:
        with component_code(trust_remote_code, MODEL_FIX):  # a family / RoPE method of one's own the folder names
            folder = CheckpointFolder.open(checkpoint_dir)
        if family is not None:
            check_family_beside(family, str(folder.path), folder.config)
        model = build_decoder(folder, max_seq_len=max_seq_len, plain_rope=plain_rope, lora=lora)
        trained = scaling_start_past_checkpoint(folder, max_seq_len, plain_rope)
        if trained is not None:  # refused by rope_scaled / apply_rope_scaling unless given original_max_seq_len
            setattr(model, UNSEEN_START_ATTR, {"max_seq_len": max_seq_len, "trained": trained,
                                               "field": "hf_decoder's max_seq_len"})
    else:
        config = decoder_config(dict(dims, family=family, max_seq_len=max_seq_len))
        model = family_named(family).decoder(config, native_positions(config), lora)
    if s2_attn:
        enable_s2_attn(model, group_size=s2_group_size, group_size_ratio=s2_group_size_ratio)
    return model


def check_decoder_source(node: Mapping[str, Any], where: str = "model") -> None:
    """An :func:`hf_decoder` node names its model one way: ``checkpoint_dir`` (the folder's config.json says family
    and dimensions; a ``family`` beside it names the family of one's own that reads it, imported here first) or
    ``family`` with dimensions (random weights), not both, not neither."""
    given = sorted(k for k in DIMENSION_KEYS if node.get(k) is not None)
    if node.get("checkpoint_dir") is not None and given:
        raise ValueError(f"{where}: checkpoint_dir={node['checkpoint_dir']!r} reads the family and dimensions from "
                         f"its config.json; drop {', '.join(f'{where}.{k}' for k in given)}")
    if node.get("checkpoint_dir") is None and node.get("family") is None:
        raise ValueError(f"{where}: give checkpoint_dir (a checkpoint folder) or family (e.g. llama) with the "
                         "dimensions (random weights)")
    if node.get("family") is not None:  # a family of one's own is imported (kept) before any folder is read
        family_named(node["family"], f"{where}.family")
