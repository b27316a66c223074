"""The provenance ``longshort-eval`` records in the results of every model it runs, not only ``longshort``.

The ``longshort`` model puts into lm-eval's results ``config`` block the project's provenance block
(:func:`torchtune_longshort.provenance.provenance`: package version, git commit, torch / torchtune / lm-eval /
transformers versions, Python, device, the stdlib corpus hash when a task read it), the checkpoint folder
(``checkpoint_dir``) and its content fingerprint (``checkpoint_fingerprint``). Another model (lm-eval's ``hf``,
``vllm``, ...) records none of them, so a report over its run said "not recorded" and could not tell whether it
evaluated the same checkpoint content as a ``longshort`` run of that folder. :func:`add_run_record` adds them, while a
``longshort-eval`` run is open, to the results file lm-eval writes (a key the model recorded itself is kept as it
is). ``checkpoint_dir`` and ``checkpoint_fingerprint`` are written where ``pretrained=`` names a local folder (a
hub name has neither). Stock ``lm_eval`` runs, which this package does not wrap, still record none.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List

from torchtune_longshort.eval.tasks import PASSKEY_DEFAULTS, TASK_FAMILIES, family_of
from torchtune_longshort.eval.tasks.common.long_text import TEXT_DEFAULTS, trained_text_overlaps
from torchtune_longshort.models.hf_checkpoint import folder_fingerprint
from torchtune_longshort.provenance import provenance

log = logging.getLogger(__name__)
# family -> (the setting naming its text source, its default, the keys of local files that replace it)
_TEXT_SETTINGS = {**{f: (f"{p}_source", TEXT_DEFAULTS["source"], (f"{p}_data_files",))
                     for f, p in (("ppl", TASK_FAMILIES["ppl"].metadata_prefix),
                                  ("misalignment", TASK_FAMILIES["misalignment"].metadata_prefix))},
                  "passkey": ("passkey_haystack", PASSKEY_DEFAULTS["haystack"],
                              ("passkey_haystack_files", "passkey_data_files"))}


def _model_args(config: Dict[str, Any]) -> Dict[str, Any]:
    from lm_eval.utils import simple_parse_args_string

    args = config.get("model_args") or {}
    return simple_parse_args_string(args) if isinstance(args, str) else dict(args)


def run_record(config: Dict[str, Any]) -> Dict[str, Any]:
    """``{"checkpoint_dir", "checkpoint_fingerprint", "provenance"}`` for the run whose lm-eval results ``config``
    this is (the first two only for a ``pretrained=`` that is a local folder)."""
    out: Dict[str, Any] = {}
    args = _model_args(config)
    pretrained = args.get("pretrained", args.get("checkpoint_dir"))
    if isinstance(pretrained, str) and pretrained and Path(pretrained).expanduser().is_dir():
        folder = Path(pretrained).expanduser().resolve()
        out["checkpoint_dir"] = str(folder)
        fingerprint = folder_fingerprint(folder)
        if fingerprint:
            out["checkpoint_fingerprint"] = fingerprint
    device = config.get("device")
    try:
        out["provenance"] = provenance(device=str(device) if device else None)
    except (RuntimeError, ValueError):  # a device string torch does not parse (e.g. a model's own "auto")
        out["provenance"] = provenance()
    return out


def add_run_record(results: object) -> None:
    """Into the ``config`` block of lm-eval's ``results`` (about to be saved), :func:`run_record`'s keys (those
    already there kept; the longshort model records them itself). A failure to make the record is a warning: the
    scores are still written. Called by :meth:`~torchtune_longshort.eval.results_written.SavedResults.watching`,
    the one wrapper of lm-eval's save during a ``longshort-eval`` run."""
    config = results.get("config") if isinstance(results, dict) else None
    if not isinstance(config, dict):
        return
    _add_trained_text(results, config)
    if {"provenance", "checkpoint_fingerprint"} <= config.keys():
        return
    try:
        for key, value in run_record(config).items():
            config.setdefault(key, value)
    except Exception as e:  # noqa: BLE001  (never lose the run's scores to their record)
        log.warning("longshort-eval: provenance not recorded in the results (%s: %s)", type(e).__name__, e)


def _add_trained_text(results: Dict[str, Any], config: Dict[str, Any]) -> None:
    """``trained_text_overlap``: the lines that said a task's stdlib source holds text the checkpoint's run trained
    on (:func:`~torchtune_longshort.eval.tasks.common.long_text.trained_text_overlaps`; the report shows them)."""
    lines: List[str] = []
    try:
        for task_config in (results.get("configs") or {}).values():
            family = family_of(task_config.get("task")) if isinstance(task_config, dict) else None
            setting, default, files = _TEXT_SETTINGS.get(family, (None, None, ()))
            metadata = task_config.get("metadata") if setting else None
            if isinstance(metadata, dict) and not any(metadata.get(k) for k in files):
                lines += [x for x in trained_text_overlaps(metadata, {setting: default}) if x not in lines]
    except Exception as e:  # noqa: BLE001  (never lose the run's scores to their record)
        log.warning("longshort-eval: trained-text overlap not recorded in the results (%s: %s)", type(e).__name__, e)
    if lines:
        config["trained_text_overlap"] = lines
