"""Unknown config keys: refused with the nearest known key, and torchtune's own names mapped to ours.

OmegaConf keeps any key a user types, so a typo (``max_step=2``, ``validation.every_n_step=1``) would otherwise run
with the default silently. A torchtune user's habits get the key this recipe reads instead
(``resume_from_checkpoint`` -> ``resume``, ``epochs`` -> ``max_steps``), or the reason there is none.
"""

from __future__ import annotations

import difflib
from typing import Dict, Iterable, Optional

from torchtune_longshort.refusals import Refusal

# torchtune recipe key -> (our key, or None when the recipe has no counterpart, and why)
TORCHTUNE_NAMES: Dict[str, tuple] = {
    "resume_from_checkpoint": ("resume", "this recipe's name for it"),
    "epochs": ("max_steps", "the dual-window stream is endless; a run is counted in optimizer steps"),
    "max_steps_per_epoch": ("max_steps", "the dual-window stream is endless; a run is counted in optimizer steps"),
    "shuffle": (None, "the stream reads documents in order (exact resume); data_seed draws the shifts e"),
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
}


class ConfigKeyError(Refusal, KeyError):
    """An unknown or missing config key; the message names it (``str`` without ``KeyError``'s quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def hint(key: str, known: Iterable[str], where: str = "") -> str:
    """``'key'`` with its "did you mean" (torchtune's own name first, then the nearest known key), if any."""
    path = f"{where}.{key}" if where else str(key)
    theirs: Optional[tuple] = TORCHTUNE_NAMES.get(str(key)) if not where else None
    if theirs is not None:
        ours, why = theirs
        if ours is not None:
            return f"{path!r} (torchtune's name: did you mean {ours!r}? {why})"
        return f"{path!r} (torchtune's key; no counterpart here: {why})"
    near = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    return f"{path!r}" + (f" (did you mean {near[0]!r}?)" if near else "")


def refuse_unknown(keys: Iterable[str], known: Iterable[str], where: str = "") -> None:
    """Raise :class:`ConfigKeyError` listing each of ``keys`` with its hint, and what the section reads."""
    keys, known = list(keys), sorted(str(k) for k in known)
    if not keys:
        return
    section = f"in {where}" if where else "at the top level"
    raise ConfigKeyError(
        f"unknown config key(s) {section}: {', '.join(hint(k, known, where) for k in keys)}. "
        f"Accepted {section}: {', '.join(known)}"
    )
