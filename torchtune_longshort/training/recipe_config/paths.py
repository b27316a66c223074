"""The paths a recipe config names, expanded and resolved once, before anything reads them: ``~``, a relative path
(against the working directory) and symlinks. A run started as ``output_dir=~/runs/x`` writes to ``$HOME/runs/x``
(not to a folder named ``~``), and the nodes that interpolate ``${output_dir}`` / ``${checkpoint_dir}`` (the
checkpointer's, the metric logger's ``log_dir``) get the resolved path too.

Resolved: ``output_dir``, ``checkpoint_dir``, ``checkpointer.checkpoint_dir`` / ``output_dir``, ``tokenizer.path``,
``metric_logger.log_dir``, ``profiler.output_dir`` and every model node's ``checkpoint_dir``. A data source's
arguments are left as given: ``path`` or ``source`` may name a Hugging Face dataset, not a file.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import GrammarParseError, InterpolationKeyError, InterpolationResolutionError

TOP_LEVEL = ("output_dir", "checkpoint_dir")  # resolved first: the nodes below interpolate them
NESTED = ("checkpointer.checkpoint_dir", "checkpointer.output_dir", "tokenizer.path", "metric_logger.log_dir",
          "profiler.output_dir")


def resolve_path(value: str) -> str:
    """``value`` with ``~`` expanded, made absolute against the working directory, symlinks resolved."""
    return str(Path(os.path.expanduser(value)).resolve())


def resolved_container(cfg: Any) -> dict:
    """``cfg`` as a plain dict, its interpolations resolved; one that names a key the config lacks (``~output_dir``,
    which ``checkpointer.output_dir: ${output_dir}`` names) refused naming both, with the fix (OmegaConf's own text
    named neither)."""
    try:
        return OmegaConf.to_container(cfg if OmegaConf.is_config(cfg) else OmegaConf.create(cfg), resolve=True)
    except (InterpolationResolutionError, GrammarParseError) as e:
        raise interpolation_refusal(e) from None


def interpolation_refusal(e: Exception) -> ValueError:
    """OmegaConf's error on a ``${...}`` (a key the config lacks, an environment variable that is not set, a
    ``${`` never closed) as one line naming the key and the fix; its own text was a traceback, or named neither."""
    key, first = getattr(e, "full_key", None) or "?", str(getattr(e, "msg", e)).splitlines()[0]
    if isinstance(e, InterpolationKeyError):
        return ValueError(f"{key}: {first}: its value refers to that key (${{...}}), which the config does not have; "
                          f"set it, or give {key} a value of its own")
    if isinstance(e, GrammarParseError):
        return ValueError(f"{key}: its value is not a valid ${{...}} interpolation ({first}): close it with '}}', or "
                          f"write a literal '$' as '\\$'")
    return ValueError(f"{key}: {first.replace('KeyError raised while resolving interpolation: ', '')}: set it, or "
                      f"give {key} a value of its own")


def _resolve_key(node: DictConfig, key: str) -> None:
    value = OmegaConf.select(node, key, default=None, throw_on_resolution_failure=False)
    if isinstance(value, str) and value.strip():
        try:
            resolved = resolve_path(value)
        except (RuntimeError, OSError) as e:  # a loop of links: Path.resolve's RuntimeError (OSError from 3.13)
            if isinstance(e, OSError) and e.errno != errno.ELOOP:
                raise
            raise ValueError(f"{key}={value!r} cannot be resolved ({e}): it names a symbolic link in a loop; fix "
                             "or remove the link, or name another path") from None
        OmegaConf.update(node, key, resolved, merge=False)


def _model_nodes(node: Any, where: str):
    if isinstance(node, Mapping):
        yield where
        inner = node.get("model")
        if isinstance(inner, Mapping):
            yield from _model_nodes(inner, f"{where}.model")


def model_vocab_key(node: Mapping[str, Any]) -> str:
    """The key of the vocabulary size the config's model node gives (``model.vocab_size``; ``model.model.vocab_size``
    inside ``rope_scaled``), '' when it gives none (read from the start checkpoint): ``node`` the whole config."""
    where, inner = "model", node.get("model")
    while isinstance(inner, Mapping) and isinstance(inner.get("model"), Mapping):
        where, inner = f"{where}.model", inner["model"]
    return f"{where}.vocab_size" if isinstance(inner, Mapping) and "vocab_size" in inner else ""


def _top_resolved(cfg: Any) -> DictConfig:
    """A copy of ``cfg`` with its :data:`TOP_LEVEL` paths resolved (first: the nodes below interpolate them)."""
    plain = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    node = OmegaConf.create(plain)
    for key in TOP_LEVEL:
        if key in node:
            _resolve_key(node, key)
    return node


def resolved_config(cfg: Any) -> DictConfig:
    """A copy of the recipe config ``cfg`` (a ``DictConfig`` or a mapping) with its paths resolved (see the module
    doc); interpolations other than those paths are kept."""
    node = _top_resolved(cfg)
    for key in NESTED:
        _resolve_key(node, key)
    model = resolved_container(node).get("model") if "model" in node else None
    for where in _model_nodes(model, "model"):
        _resolve_key(node, f"{where}.checkpoint_dir")
    return node


def written_path(cfg: Any, key: str) -> Optional[Path]:
    """``key``'s path as the config writes it, made absolute with ``~`` expanded and the :data:`TOP_LEVEL` keys it
    interpolates resolved (as :func:`resolved_config` resolves them), its own symbolic links not followed: where
    ``metric_logger.log_dir: ${output_dir}/logs`` lies inside ``output_dir`` when ``<output_dir>/logs`` is a link out
    of it. None where the config gives no path there."""
    value = OmegaConf.select(_top_resolved(cfg), key, default=None, throw_on_resolution_failure=False)
    return Path(os.path.abspath(os.path.expanduser(value))) if isinstance(value, str) and value.strip() else None


_FIELD_FIRST = re.compile(r"([A-Za-z_]\w*(?:\.\w+)*)=")


def interpolation_at(cfg: Any, field: str) -> Optional[str]:
    """``field``'s value as written in the config ``cfg`` (a ``DictConfig`` or a mapping, unresolved) when it
    interpolates other keys (``${checkpoint_dir}``, ``${output_dir}/logs``), else None."""
    node = _written_at(cfg, field)
    return node if isinstance(node, str) and "${" in node else None


_ABSENT = object()


def _written_at(cfg: Any, field: str) -> Any:
    """``field``'s value as written in ``cfg`` (unresolved); ``_ABSENT`` where the config has no such key."""
    node = OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else cfg
    for part in field.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _ABSENT
    return node


# What an empty start folder is set to: a Hugging Face folder, the shipped real-model configs' opening comment says
# how to get one
START_FOLDER_HINT = ("the start checkpoint's folder (a Hugging Face folder: config.json, its weights and tokenizer; "
                     "the opening comment of a shipped real-model config says how to get one: for "
                     "smollm2_135m/*.yaml, python -m torchtune_longshort.models.gguf --model smollm2-135m-instruct "
                     "converts it and prints the folder)")


def naming_the_source(err: Exception, cfg: Any) -> Exception:
    """``err`` (a refusal that starts ``field=value``) told which key to set when the config's ``field`` takes its
    value from another one: the shipped real-model configs' ``tokenizer.path: ${checkpoint_dir}`` was refused as
    ``tokenizer.path='/path/to/...' does not exist``, naming a key the user never wrote. Returns ``err``."""
    m = _FIELD_FIRST.match(str(err)) if len(err.args) == 1 and isinstance(err.args[0], str) else None
    raw = interpolation_at(cfg, m.group(1)) if m else None
    # a path under one key (${checkpoint_dir}, ${checkpoint_dir}/tokenizer.model): that key's own value
    whole = re.fullmatch(r"\$\{([^}]+)\}([^$]*)", raw) if raw is not None else None
    quoted = re.match(r"'([^']*)'|\"([^\"]*)\"", str(err)[m.end():]) if whole else None
    full = next(v for v in quoted.groups() if v is not None) if quoted else ""
    tail = whole.group(2) if whole else ""
    value = full[:len(full) - len(tail)] if full.endswith(tail) else ""
    if whole and _written_at(cfg, whole.group(1)) is None:
        # checkpoint_dir= (or null) on the command line: refused as tokenizer.path=None, the key it reached first
        err.args = (f"{whole.group(1)} is empty ({m.group(1)} is {raw!r} in the config and was checked first): set "
                    f"{whole.group(1)} to {START_FOLDER_HINT if whole.group(1) == 'checkpoint_dir' else 'a value'}",)
        return err
    if whole and isinstance(err, FileNotFoundError) and value and not Path(value).exists():
        # the key the user set is the one that names a missing path: checkpoint_dir=<typo> was refused as the
        # tokenizer.path its value reached first
        err.args = (f"{whole.group(1)}={value!r} does not exist ({m.group(1)} is {raw!r} in the config and was "
                    f"checked first): set {whole.group(1)} to an existing path, or {m.group(1)} itself",)
        return err
    if raw is not None:
        keys = list(dict.fromkeys(re.findall(r"\$\{([^}]+)\}", raw)))
        err.args = (f"{err.args[0]}; {m.group(1)} is {raw!r} in the config: set {' / '.join(keys)}, or "
                    f"{m.group(1)} itself",)
    return err
