"""A run's task lengths against the longest sequence its model takes, told before lm-eval starts.

A length past the model's limit scores NaN once the model has loaded and every other length has run (the run exits
0): when every length of every length-swept task of the run is past it, the run is refused in one line; when some
are, one warning line names them and the run goes on. The limit counts only where it is a hard one: an explicit
``max_length`` of the ``longshort`` model (extrapolating past the trained positions is what this toolkit is for), and
for another model its explicit ``max_length``, which the pack's tasks refuse past
(:func:`~.tasks.common.unavailable.model_positions`). Each task's lengths are the ones it reads
(:func:`~.tasks.common.lengths.lengths_source`), else its YAML's default; the families come from the registry.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from torchtune_longshort.eval.tasks import TaskFamily, member_family, tasks_path
from torchtune_longshort.eval.tasks.common.lengths import length_label, lengths_source, parse_lengths
from torchtune_longshort.eval.tasks.common.unavailable import MODEL_KEY, model_positions

logger = logging.getLogger(__name__)

FIX = "--metadata max_seq_lengths=... (or the task's own <prefix>_max_seq_lengths) within it, or a larger max_length"


def _default_lengths(family: TaskFamily) -> Any:
    """The ``max_seq_lengths`` of the family's own YAML (its default lengths); None when it sets none."""
    loader = type("_Loader", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("!", lambda *_: None)  # lm-eval's !function tags
    path = tasks_path() / family.folder / f"{family.task}.yaml"
    try:
        data = yaml.load(path.read_text(), Loader=loader) or {}
    except (OSError, yaml.YAMLError):
        return None
    return (data.get("metadata") or {}).get("max_seq_lengths") if isinstance(data, dict) else None


def swept_lengths(metadata: Mapping[str, Any], tasks: Sequence[str]) -> Dict[str, List[int]]:
    """``{task: lengths}`` of each length-swept task of ``tasks`` (a group member counts as its family): the
    lengths ``metadata`` gives it, else its YAML's default. BABILong's labels count as tokens (``4k``: 4096)."""
    out: Dict[str, List[int]] = {}
    for task in tasks:
        family = member_family(task)
        if family is None or not family.length_swept:
            continue
        source = lengths_source(metadata, family.metadata_prefix)
        value = metadata.get(source)
        value = _default_lengths(family) if value in (None, "", []) else value
        if value not in (None, "", []):
            out[task] = parse_lengths(value, source)
    return out


def model_limit(model: str, model_args: Mapping[str, Any], run_limit: Optional[int]) -> Optional[Tuple[int, str]]:
    """``(tokens, words)``: the hard limit of the run's model and how to name it; None when it has none known.
    ``run_limit``: the ``longshort`` model's (:attr:`~.model.args.ModelArgs.run_limit`)."""
    given = model_args.get("max_length")
    if model == "longshort":
        if given in (None, "") or run_limit is None:
            return None
        covered = run_limit < parse_lengths(given, "max_length")[0]  # past the trained positions, not allowed
        more = f", {run_limit} tokens without allow_extrapolation=true" if covered else ""
        return run_limit, f"max_length={given}{more}"
    limit = model_positions({**model_args, MODEL_KEY: model}) if given not in (None, "") else None
    return None if limit is None else (limit, f"max_length={given}")


def check_lengths_fit(metadata: Mapping[str, Any], tasks: Sequence[str], model: str,
                      model_args: Mapping[str, Any], run_limit: Optional[int] = None) -> str:
    """``ValueError`` when every length of every length-swept task of ``tasks`` is past the model's limit
    (:func:`model_limit`); when some are, the warning line naming them, logged and returned; "" otherwise."""
    limit = model_limit(model, model_args, run_limit)
    swept = swept_lengths(metadata, tasks)
    if limit is None or not swept:
        return ""
    past = {t: [n for n in lengths if n > limit[0]] for t, lengths in swept.items()}
    past = {t: lengths for t, lengths in past.items() if lengths}
    if not past:
        return ""
    named = "; ".join(f"{t} at {', '.join(length_label(n) for n in lengths)}" for t, lengths in past.items())
    head = f"--model {model} runs at most {limit[0]} tokens ({limit[1]})"
    if all(len(past.get(t, [])) == len(lengths) for t, lengths in swept.items()):
        raise ValueError(f"{head}, and every length of the run is longer: {named} would all score NaN; give {FIX}")
    line = f"{head}: {named} will score NaN (longer); the other lengths run. To score them, give {FIX}"
    logger.warning("%s", line)  # once, before lm-eval's start-up log
    return line
