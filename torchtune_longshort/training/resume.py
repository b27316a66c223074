"""What a resumed run may change: the saved config (``recipe_state.pt``) against the new one.

Exact resume needs the same model, data, windows and loss; a change there would silently train another run, so it
is refused. Changes a user means (more steps, another learning rate after a NaN, logging, checkpoint period) are
applied and logged.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

# Keys whose change breaks exactness (top-level config keys; nested nodes compared whole).
EXACT_KEYS = (
    "model", "tokenizer", "checkpointer", "checkpoint_dir", "dataset", "seq_len", "e_range", "loss", "batch_size",
    "gradient_accumulation_steps", "seed", "data_seed", "position_sampler", "dtype", "lr_scheduler",
)
# Keys a resumed run applies as given (and logs): everything not in EXACT_KEYS and not about the folder itself.
_IGNORED = ("resume", "overwrite_output_dir", "output_dir")


def _flat(d: Any, prefix: str = "") -> Dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: Dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def compare_resume_config(saved: Dict[str, Any], new: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
    """Refuse changes that break exact resume (``ValueError`` listing each); return the others as
    ``(key, old, new)`` for the caller to apply and log. Both configs are plain dicts (interpolations resolved)."""
    broken, applied = [], []
    old_flat, new_flat = _flat(saved), _flat(new)
    for key in sorted(set(old_flat) | set(new_flat)):
        top = key.split(".", 1)[0]
        a, b = old_flat.get(key, "<absent>"), new_flat.get(key, "<absent>")
        if a == b or top in _IGNORED:
            continue
        if top in EXACT_KEYS:
            # The lr schedule's shape is fixed by the run; its length follows max_steps and is not a change here.
            broken.append(f"{key}: {a!r} -> {b!r}")
        else:
            applied.append((key, a, b))
    if broken:
        raise ValueError(
            "resume=True with a config that changes what the run trains, which would not continue the same run "
            f"exactly: {'; '.join(broken)}. Resume with the saved values (recipe_state.pt 'config'), or start a new "
            "run in another output_dir"
        )
    return applied
