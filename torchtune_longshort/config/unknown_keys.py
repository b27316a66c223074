"""Unknown config keys: refused with the nearest known key, and torchtune's own names mapped to ours.

OmegaConf keeps any key a user types, so a typo (``max_step=2``, ``validation.every_n_step=1``) would otherwise run
with the default silently. A torchtune user's habits get the key this recipe reads instead
(``resume_from_checkpoint`` -> ``resume``, ``epochs`` -> ``max_steps``), or the reason there is none. A torchtune key
at a value that asks for what this recipe does anyway (``resume_from_checkpoint: False``, ``save_adapter_weights_only:
False``, as torchtune's shipped configs carry them) is accepted (:func:`torchtune_keys_as_here`).
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, Iterable, Mapping, Optional

from torchtune_longshort.refusals import Refusal

# torchtune recipe key -> (our key, or None when the recipe has no counterpart, and why)
TORCHTUNE_NAMES: Dict[str, tuple] = {
    "resume_from_checkpoint": ("resume", "this recipe's name for it"),
    "epochs": ("max_steps", "the dual-window stream is endless; a run is counted in optimizer steps"),
    "max_steps_per_epoch": ("max_steps", "the dual-window stream is endless; a run is counted in optimizer steps"),
    "log_peak_memory_stats": (None, "peak memory is always logged (peak_memory_gib)"),
    "optimizer_in_bwd": (None, "not supported by this recipe (gradient clipping and accumulation need the step)"),
    "save_adapter_weights_only": (None, "every step_<k> is a whole checkpoint folder, LoRA merged"),
    "low_cpu_ram": (None, "this recipe loads the start weights one way, with no such switch"),
    "custom_sharded_layers": (None, "under torchrun each transformer layer and the output projection are their own "
                                    "FSDP2 units; the others stay in the root unit"),
    "fsdp_cpu_offload": (None, "FSDP2 CPU offload is not supported by this recipe (GPU memory: "
                               "enable_activation_checkpointing, enable_activation_offloading, loss.num_chunks)"),
    "fsdp": (None, "FSDP2 CPU offload is not supported by this recipe; FSDP2's resharding: fsdp_reshard_after_forward"),
    "collate_fn": (None, "the dual-window batcher makes the batches (whole windows, no padding)"),
    "tensor_parallel_dim": (None, "tensor parallelism is not supported by this recipe (FSDP2 data parallel only)"),
    "tensor_parallel_plan": (None, "tensor parallelism is not supported by this recipe (FSDP2 data parallel only)"),
    "quantizer": (None, "quantization-aware training is not supported by this recipe (QLoRA: model.quantize_base)"),
    # torchtune's validation (its releases after 0.6.1): this recipe's validation node
    "run_val_every_n_steps": ("validation.every_n_steps", "validation here is the validation node: a held-out set of "
                                                          "fixed-length sequences, logged as val_ce / val_ppl"),
    "dataset_val": ("validation.dataset", "validation here is the validation node: a held-out set of fixed-length "
                                          "sequences, logged as val_ce / val_ppl"),
    "enable_async_checkpointing": (None, "each step_<k> is written before the next step trains"),
    "ac_mode": ("enable_activation_checkpointing", "selective activation checkpointing is not supported by this "
                                                   "recipe: enable_activation_checkpointing checkpoints every layer"),
    "ac_option": ("enable_activation_checkpointing", "selective activation checkpointing is not supported by this "
                                                     "recipe: enable_activation_checkpointing checkpoints every layer"),
}


# torchtune recipe key -> (its values that ask for what this recipe does anyway, what this recipe does): accepted,
# and nothing read (any other value is refused with the key's TORCHTUNE_NAMES hint)
TORCHTUNE_AS_HERE: Dict[str, tuple] = {
    "resume_from_checkpoint": ((False,), "a fresh start unless resume=True, this recipe's key"),
    "max_steps_per_epoch": ((None,), "no cap: the run is max_steps optimizer steps"),
    # False asks for less logging: harmless to log it anyway
    "log_peak_memory_stats": ((True, False), "peak_memory_gib is logged either way"),
    "save_adapter_weights_only": ((False,), "every step_<k> is the whole model, LoRA merged, with its adapter/"),
    "optimizer_in_bwd": ((False,), "the optimizer steps after the backward pass"),
    "low_cpu_ram": ((False,), "the start weights are loaded one way"),
    "fsdp_cpu_offload": ((False,), "no FSDP2 CPU offload"),
    "fsdp": (({"cpu_offload": False},), "no FSDP2 CPU offload"),
    "tensor_parallel_dim": ((1,), "no tensor parallelism"),
    "enable_async_checkpointing": ((False,), "checkpoints are written synchronously"),
    # torchtune's default (None: no layer sharded on its own beyond each decoder layer)
    "custom_sharded_layers": ((None, []), "each decoder layer and the output projection are their own FSDP2 units"),
    "ac_mode": ((None,), "no selective activation checkpointing"),
    "ac_option": ((None,), "no selective activation checkpointing"),
}
# torchtune's recipes build tensor_parallel_plan and use it only when tensor_parallel_dim > 1
_UNUSED_WHEN: Dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "tensor_parallel_plan": lambda node: _same(node.get("tensor_parallel_dim", 1), 1),
}


def _same(a: Any, b: Any) -> bool:
    """``a == b`` with the types equal too (YAML's ``0`` is not ``False``, ``True`` is not ``1``)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _yaml(v: Any) -> str:
    """``v`` as torchtune's configs write it (``False``, ``null``, ``{cpu_offload: False}``)."""
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}: {_yaml(x)}" for k, x in v.items()) + "}"
    return "null" if v is None else str(v)


def torchtune_keys_as_here(node: Mapping[str, Any]) -> Dict[str, str]:
    """``{key: "key: value (what this recipe does)"}`` for the top-level keys of the recipe config ``node`` that are
    torchtune's and ask, at their value, for what this recipe does anyway (``resume_from_checkpoint: False``): the
    config check accepts them and reads nothing from them."""
    out = {}
    for key, value in node.items():
        if key in TORCHTUNE_AS_HERE and any(_same(value, v) for v in TORCHTUNE_AS_HERE[key][0]):
            out[key] = f"{key}: {_yaml(value)} ({TORCHTUNE_AS_HERE[key][1]})"
        elif key in _UNUSED_WHEN and _UNUSED_WHEN[key](node):
            out[key] = f"{key} (unused: tensor_parallel_dim is 1)"
    return out


class ConfigKeyError(Refusal, KeyError):
    """An unknown or missing config key; the message names it (``str`` without ``KeyError``'s quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def hint(key: str, known: Iterable[str], where: str = "", elsewhere: Optional[Mapping[str, str]] = None) -> str:
    """``'key'`` with its "did you mean" (torchtune's own name first, then the path of another section that takes
    it, from ``elsewhere``, then the nearest known key), if any."""
    path = f"{where}.{key}" if where else str(key)
    home = (elsewhere or {}).get(str(key))
    if home is not None:
        return f"{path!r} (did you mean {home!r}? {'a top-level key' if '.' not in home else 'it is read there'})"
    theirs: Optional[tuple] = TORCHTUNE_NAMES.get(str(key)) if not where else None
    if theirs is not None:
        ours, why = theirs
        accepted = TORCHTUNE_AS_HERE.get(str(key), ((),))[0]
        why += "".join(f"; {key}: {_yaml(v)} is accepted ({TORCHTUNE_AS_HERE[key][1]})" for v in accepted)
        if ours is not None:
            return f"{path!r} (torchtune's name: did you mean {ours!r}? {why})"
        return f"{path!r} (torchtune's key; no counterpart here: {why})"
    near = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    return f"{path!r}" + (f" (did you mean {near[0]!r}?)" if near else "")


# the top-level node every study YAML carries (torchtune_longshort.study.config): such a file is not a recipe config
STUDY_MARKER_KEY = "not_a_torchtune_config"


def refuse_study_config(top_level_keys: Iterable[str]) -> None:
    """Raise :class:`ConfigKeyError` naming the study's command when ``top_level_keys`` hold the study marker: asked
    before a recipe config's ``${...}`` are resolved, as a study's ``recipe_overrides`` name keys of the recipe config
    it merges into (``${tokenizer.path}``), which the study file alone lacks."""
    if STUDY_MARKER_KEY in list(top_level_keys):
        raise ConfigKeyError(
            f"this is a study config (its top-level {STUDY_MARKER_KEY} node), not a recipe config: run it with "
            "`python -m torchtune_longshort.study --config <file>` (a Table-1 config: "
            "`python -m torchtune_longshort.study.table1 --config <file>`)"
        )


def refuse_unknown(keys: Iterable[str], known: Iterable[str], where: str = "",
                   elsewhere: Optional[Mapping[str, str]] = None) -> None:
    """Raise :class:`ConfigKeyError` listing each of ``keys`` with its hint, and what the section reads (a study
    config, known by its marker, is named as one instead); its ``refused`` is ``(keys, known, where)``, for a caller
    that knows the whole config to raise it again with ``elsewhere`` (``{key: the path that takes it}``)."""
    keys, known = list(keys), sorted(str(k) for k in known)
    if not keys:
        return
    if not where:
        refuse_study_config(keys)
    section = f"in {where}" if where else "at the top level"
    # torchtune's own keys are known, and answered: not "unknown" (tensor_parallel_dim=2 was, then explained)
    theirs = [k for k in keys if not where and str(k) in TORCHTUNE_NAMES]
    ours = [k for k in keys if k not in theirs]
    groups = (("unknown config key(s)", ours), ("config key(s) this recipe does not take", theirs))
    parts = [f"{heading} {section}: {', '.join(hint(k, known, where, elsewhere) for k in group)}"
             for heading, group in groups if group]
    err = ConfigKeyError(f"{'; '.join(parts)}. Accepted {section}: {', '.join(known)}")
    err.refused = (keys, known, where)
    raise err


def plus_keys(node: Mapping[str, Any]) -> tuple:
    """``(node with each top-level ``+key`` merged into ``key``, ["+key.sub", ...] the dotted paths so given)``.
    ``+key=value`` is Hydra's way to add a key; torchtune's command line has no ``+`` (``key=value`` sets a key or
    adds it), so OmegaConf kept a node named ``+key`` that nothing reads."""
    merged: Dict[str, Any] = {k: v for k, v in node.items() if not str(k).startswith("+")}
    paths = []
    for key in (k for k in node if str(k).startswith("+")):
        name, value = str(key)[1:], node[key]
        paths += [f"+{name}{sub}" for sub in _leaf_paths(value)]
        merged[name] = _deep_merged(merged.get(name), value)
    return merged, paths


def _leaf_paths(value: Any, prefix: str = "") -> list:
    if isinstance(value, Mapping) and value:
        return [p for k, v in value.items() for p in _leaf_paths(v, f"{prefix}.{k}")]
    return [prefix]


def _deep_merged(old: Any, new: Any) -> Any:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return {**old, **{k: _deep_merged(old.get(k), v) for k, v in new.items()}}
    return new


def plus_message(paths: Iterable[str]) -> str:
    """What the refusal of ``+key`` overrides (:func:`plus_keys`' paths) says about the ``+``."""
    paths = list(paths)
    given = ", ".join(f"{p[1:]}=..." for p in paths)
    return (f"{', '.join(repr(p) for p in paths)}: torchtune's command line takes no '+' (Hydra's prefix to add a "
            f"key; here key=value sets a key or adds it, and '+key' made a node nothing reads): give {given}")
