"""lm-eval's ``--config`` / ``-C`` (a YAML file of ``run``'s arguments), read as the command line it stands for.

lm-eval 0.4.13 merges the YAML under the command line (``EvaluatorConfig.from_cli``: an option given on the command
line replaces the YAML's value whole). The wrapper reads and adds options (``--model``, ``--metadata``,
``--device``, ``--include_path``, ...) on the command line only, so a YAML's ``model: longshort`` was checked and
named to the tasks as ``hf``, and its ``metadata:`` was replaced whole by the ``--metadata`` the wrapper adds (the
YAML's ``max_seq_lengths`` / ``ppl_source`` were dropped without a word, and the run scored NaN at the default lengths
after waiting on the hub). :func:`config_options` puts each such key of the YAML on the command line, where the
command line does not give it: lm-eval then reads the same value, and the wrapper sees it.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import fields
from typing import Any, List, Optional, Tuple

# run's options the wrapper reads or adds (cli_run.lm_eval_argv / check_arguments, the task index)
WRAPPER_KEYS = ("model", "model_args", "tasks", "metadata", "device", "batch_size", "max_batch_size", "output_path",
                "include_path", "apply_chat_template", "gen_kwargs")


def _read(path: str) -> dict:
    """The YAML at ``path`` as lm-eval reads it, its keys checked against lm-eval's (one-line refusals; lm-eval ends
    with a traceback for a key it does not know or a root that is no mapping)."""
    # deferred: lm_eval (its evaluation config; tasks-path answers without it)
    from lm_eval.config.evaluate_config import EvaluatorConfig

    try:
        data = EvaluatorConfig.load_yaml_config(path)
    except TypeError as e:  # a root that is no mapping
        raise ValueError(f"--config {path}: {e}; write `key: value` lines (`model: longshort`)") from None
    known = [f.name for f in fields(EvaluatorConfig) if f.name != "config"]
    bad = [str(k) for k in data if k not in known]
    if bad:
        hints = [repr(k) + "".join(f" (did you mean {m!r}?)" for m in difflib.get_close_matches(k, known, n=1))
                 for k in bad]
        raise ValueError(f"--config {path}: unknown key(s) {', '.join(hints)}; lm-eval's run reads: "
                         f"{', '.join(sorted(known))}")
    return data


def _as_option(key: str, value: Any) -> List[str]:
    """``key: value`` of the YAML as ``run``'s command line writes it (nothing for an unset value, as lm-eval skips
    it)."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return []
    if value is True:
        return [f"--{key}"] if key == "apply_chat_template" else [f"--{key}", "True"]
    if key == "model_args" and isinstance(value, dict) and all(_plain(v) for v in value.values()):
        # as `k=v,...`, which lm-eval reads as it reads JSON and the wrapper reads too (its device, batch_size):
        # as JSON, a model_args device reached lm-eval's hf beside the wrapper's --device (a TypeError)
        return [f"--{key}", ",".join(f"{k}={v}" for k, v in value.items())]
    if isinstance(value, dict):
        return [f"--{key}", json.dumps(value)]
    if isinstance(value, (list, tuple)):
        return [f"--{key}", ",".join(map(str, value))]
    return [f"--{key}", str(value)]


def _plain(value: Any) -> bool:
    """A model_args value that ``k=v`` carries as lm-eval's parser gives it back (its handle_arg_string)."""
    return isinstance(value, (str, int, float, bool)) and not any(c in str(value) for c in ",=") and str(value) != ""


def device_given_as(path: str) -> Tuple[str, str]:
    """How a device refusal names the device the YAML at ``path`` gives (its ``model_args`` device, in either form,
    or its ``device`` key), and the fix."""
    from lm_eval.utils import simple_parse_args_string  # deferred: lm_eval, as _read

    args = _read(path).get("model_args")
    if "device" in (args if isinstance(args, dict) else simple_parse_args_string(args or "")):
        return f"--config {path}: model_args device", "device: cpu in its model_args"
    return f"--config {path}: device", "device: cpu there"


def config_options(out: List[str], given: Optional[str]) -> List[str]:
    """``out`` (long option names) with the wrapper's keys of the YAML ``given`` (``--config``'s value, or None)
    that ``out`` does not give, as options after the subcommand (``--config`` stays: lm-eval reads the rest)."""
    if given is None:
        return out
    data = _read(given)
    names = {a.split("=", 1)[0] for a in out if a.startswith("--")}
    added = [a for key in WRAPPER_KEYS if f"--{key}" not in names for a in _as_option(key, data.get(key))]
    at = 1 if out[:1] == ["run"] else 0
    return out[:at] + added + out[at:]
