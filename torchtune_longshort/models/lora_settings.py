"""The LoRA / QLoRA settings of a model node (torchtune's keywords: ``lora_rank``, ``lora_alpha``, ``lora_dropout``,
``lora_attn_modules``, ``apply_lora_to_mlp``, ``apply_lora_to_output``), checked before anything is built.

torchtune's builders take what they are given: rank 0 ended in a ``ZeroDivisionError`` and a negative rank in a
tensor of negative size, both after the run had claimed its output folder; ``lora_alpha`` 0 scales every adapter's
output (and gradient) by ``alpha / r = 0``, so nothing trains; a target name that is not one of torchtune's four
attention projections (``o_proj``, ``w1``, a typo) was skipped without a word. Each is refused here in one line naming
the key and what it accepts, as is ``lora_attn_modules: []``, which torchtune's builders refuse and which ran as the
default ``[q_proj, v_proj]`` instead.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Mapping

# torchtune's LORA_ATTN_MODULES: the only names its lora builders read from lora_attn_modules
ATTN_MODULES = ("q_proj", "k_proj", "v_proj", "output_proj")
# what a name from transformers' (or torchtune's MLP) vocabulary is called here
_OTHER_NAMES = {
    "o_proj": "'output_proj'", "out_proj": "'output_proj'", "qkv_proj": "'q_proj', 'k_proj' and 'v_proj'",
    **{n: "apply_lora_to_mlp=True (every MLP projection)" for n in
       ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "w1", "w2", "w3", "mlp")},
    **{n: "apply_lora_to_output=True" for n in ("lm_head", "output")},
}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_modules(modules: Any, where: str) -> None:
    key = f"{where}.lora_attn_modules"
    if modules is None:
        return
    if isinstance(modules, str) or not isinstance(modules, (list, tuple)):
        raise ValueError(f"{key}={modules!r} is not accepted: expected a list of names from {list(ATTN_MODULES)}")
    for name in modules:
        if name in ATTN_MODULES:
            continue
        # a typo of a transformers name ('o_projj') is nearer that name than any of torchtune's: hint what it means
        names = {**{m: repr(m) for m in ATTN_MODULES}, **_OTHER_NAMES}
        near = _OTHER_NAMES.get(str(name).lower()) or next(
            (names[m] for m in difflib.get_close_matches(str(name), list(names), n=1)), None)
        hint = f" (for {name!r} use {near})" if near else ""
        raise ValueError(f"{key}: {name!r} is not a module torchtune's LoRA builders adapt{hint}; accepted: "
                         f"{list(ATTN_MODULES)}, with apply_lora_to_mlp / apply_lora_to_output for the MLP and output")


def check_lora_settings(node: Mapping[str, Any], where: str = "model") -> None:
    """Refuse LoRA keywords of model node ``node`` (at config path ``where``) that torchtune would build into no
    adapter, a crash, or adapters that never train; nothing to check without ``lora_rank`` (full fine-tuning)."""
    rank = node.get("lora_rank")
    if rank is None:
        given = sorted(k for k, v in node.items() if str(k).startswith(("lora_", "apply_lora", "quantize_base"))
                       and v not in (None, False, 0.0, [], ()))
        if given:  # refused when the model was built, after the run had claimed its output folder
            raise ValueError(f"{where}: LoRA settings {given} given without {where}.lora_rank: set lora_rank (and "
                             "lora_alpha), or drop them for full fine-tuning")
        return
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"{where}.lora_rank={rank!r} is not accepted: expected an integer >= 1 (e.g. 8), or no "
                         f"lora_rank for full fine-tuning")
    alpha = node.get("lora_alpha")
    if alpha is None:
        raise ValueError(f"{where}.lora_rank={rank} is set but {where}.lora_alpha is not: set lora_alpha "
                         f"(torchtune's configs use 2 x rank, here {2 * rank})")
    if not (_is_number(alpha) and alpha > 0):
        raise ValueError(f"{where}.lora_alpha={alpha!r} is not accepted: expected a number > 0 (adapters add "
                         f"alpha / rank x B @ A; torchtune's configs use 2 x rank, here {2 * rank})")
    dropout = node.get("lora_dropout")
    if dropout is not None and not (_is_number(dropout) and 0 <= dropout < 1):
        raise ValueError(f"{where}.lora_dropout={dropout!r} is not accepted: expected a number in [0, 1) (1 would "
                         "drop every adapter input)")
    modules = node.get("lora_attn_modules")
    _check_modules(modules, where)
    if modules is not None and not modules:
        raise ValueError(f"{where}.lora_attn_modules=[] is not accepted: torchtune's LoRA builders adapt at least one "
                         f"attention projection (an empty list ran as the default [q_proj, v_proj]); name them from "
                         f"{list(ATTN_MODULES)}, or drop the key for [q_proj, v_proj]")
