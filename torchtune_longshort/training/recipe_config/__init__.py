"""The recipe's typed config: every field declared once (default, doc, check) and built once, before any side effect.

:func:`load_recipe_config` turns the OmegaConf node into a :class:`RecipeConfig`: unknown keys refused at every level
with "did you mean" (torchtune's own names too), each value checked with its field named, each ``_component_`` node
checked before it is built where its arguments can be, then the rules between fields (:mod:`.rules`), the tokenizer
built and checked against the model (:mod:`.tokenizer_check`) and the output folder's rules and inputs
(:mod:`.inputs`), its paths resolved once (:mod:`.paths`). Nothing here writes a file or changes a folder, its mtime
included (whether a folder the run will create can be created is tried with an unnamed file,
:func:`~torchtune_longshort.config.values.check_creatable`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from torchtune_longshort.config.fields import build_section, section_keys
from torchtune_longshort.rope.checkpoint_code import RECIPE_FIX, checkpoint_code
from torchtune_longshort.training.recipe_config.key_homes import key_homes
from torchtune_longshort.training.recipe_config.inputs import (
    WRITTEN_FOLDERS, check_overwrite, input_paths, written_names,
)
from torchtune_longshort.data.tokenizer_training import VocabBelowCharacters
from torchtune_longshort.training.recipe_config.paths import (model_vocab_key, naming_the_source, resolved_config,
                                                              resolved_container, written_path)
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig
from torchtune_longshort.training.recipe_config.rope_node import ROPE_SCALED
from torchtune_longshort.training.recipe_config.tokenizer_check import check_tokenizer, load_tokenizer, model_key_of
from torchtune_longshort.training.recipe_config.model_match import (check_tokenizer_vocab, check_window_bos,
                                                                    declared_vocab)
from torchtune_longshort.training.recipe_config.rules import check_built_model, check_rules
from torchtune_longshort.config.unknown_keys import (ConfigKeyError, plus_keys, plus_message, refuse_study_config,
                                                    refuse_unknown, torchtune_keys_as_here)


def load_recipe_config(cfg: Any, world_size: int = 1, local: bool = True) -> RecipeConfig:
    """The checked, typed config of an OmegaConf node (or a plain mapping) for a run on ``world_size`` processes,
    its paths resolved (:func:`~.paths.resolved_config`). ``local=False`` checks keys, values and the rules between
    fields, not what the config names on this machine (files, devices, the output folder): a study checks every
    run's config before its base checkpoint exists.

    Raises ``ConfigKeyError`` (a ``KeyError``) for unknown or missing keys, ``ValueError`` /
    ``FileNotFoundError`` / ``FileExistsError`` naming the field for values, before any side effect."""
    # a study file first: its recipe_overrides' ${tokenizer.path} names the recipe config's key, not its own
    refuse_study_config(cfg.keys() if hasattr(cfg, "keys") else ())
    node = resolved_container(resolved_config(cfg))  # a ${...} naming a key the config lacks: refused naming both
    _refuse_plus_keys(node, local)
    # torchtune's keys at values that ask for what this recipe does (resume_from_checkpoint: False): nothing to read
    as_here = torchtune_keys_as_here(node)
    # a start folder is someone's, as pretrained= is: code its config.json names is imported only when trusted (or
    # named by this config itself); a path the check imports is held after, so the setup reads it as before
    checkpointer = node.get("checkpointer")
    trust = isinstance(checkpointer, dict) and checkpointer.get("trust_remote_code") is True
    _refuse_contradicting_trust(node, trust)
    _refuse_overridden_false(node, checkpointer)
    # a component's own trust_remote_code=true (model., tokenizer.) is its answer for the folder it reads (README:
    # inside a reader, as component_code reads it): the paths that folder names are taken as the config's own, by every
    # read of it in this check (the checkpointer's of the same start folder too: the component would import them anyway)
    with checkpoint_code(trust, RECIPE_FIX, own=[*_strings(node), *_trusted_by_components(node)]):
        return _checked(cfg, node, as_here, world_size, local)


def _refuse_contradicting_trust(node: dict, trust: bool) -> None:
    """``checkpointer.trust_remote_code: true`` beside a ``model`` / ``tokenizer`` component's own
    ``trust_remote_code: false``: the check reads every folder under the checkpointer's answer (and a path it imports
    is held after), so the component's false could not be honoured; refused naming both (README 'Code a checkpoint
    names'). A ``rope_scaled`` wrapper's key is no reader's (its extra keys go to the RoPE method): the walk goes
    on into the model it wraps, and the RoPE check refuses the key naming its home (``model.model``)."""
    if not trust:
        return
    pending = [(k, node.get(k)) for k in ("model", "tokenizer")]
    while pending:
        where, part = pending.pop(0)
        if not isinstance(part, dict):
            continue
        if part.get("trust_remote_code") is False and part.get("_component_") != ROPE_SCALED:
            raise ValueError(
                f"{where}.trust_remote_code=false contradicts checkpointer.trust_remote_code=true: the checkpointer's "
                f"true lets the run import the code a folder's config.json names, so {where}'s false would not be "
                f"honoured; give one answer: drop {where}.trust_remote_code=false to trust that code, or "
                f"checkpointer.trust_remote_code=true not to")
        pending.extend((f"{where}.{k}", v) for k, v in part.items() if isinstance(v, dict))


def _refuse_overridden_false(node: dict, checkpointer: Any) -> None:
    """``checkpointer.trust_remote_code: false`` given beside a ``model`` / ``tokenizer`` component's own
    ``trust_remote_code: true`` whose folder names a path the checkpointer's folder names too: the component's true
    takes that path as the config's own for every read (the checkpointer's included), so the checkpointer's false
    could not be honoured; refused naming both, as the other way round is (README 'Code a checkpoint names')."""
    if not isinstance(checkpointer, dict) or checkpointer.get("trust_remote_code") is not False:
        return
    named = set(_named_paths(checkpointer.get("checkpoint_dir")))
    for where, path in _component_trust(node):
        if path in named:
            raise ValueError(
                f"checkpointer.trust_remote_code=false contradicts {where}.trust_remote_code=true: {where}'s true "
                f"trusts {path!r}, which the checkpointer's folder {checkpointer.get('checkpoint_dir')}'s config.json "
                f"names too, so the checkpointer's false would not be honoured; give one answer: drop "
                f"checkpointer.trust_remote_code=false to trust that code, or {where}.trust_remote_code=true not to")


def _trusted_by_components(node: dict) -> Iterator[str]:
    """The dotted paths (``longshort_family``, ``longshort_rope.method``) the ``config.json`` of each folder names
    that a ``model`` / ``tokenizer`` component node reading it (``checkpoint_dir``, ``path``) trusts by its own
    ``trust_remote_code: true``; read as JSON, nothing imported (a folder that does not read is the check's to say)."""
    return (path for _, path in _component_trust(node))


def _component_trust(node: dict) -> Iterator[tuple]:
    """``(where, path)`` for each path of :func:`_trusted_by_components`, ``where`` the component node's key."""
    pending = [(k, node.get(k)) for k in ("model", "tokenizer")]
    while pending:
        where, part = pending.pop()
        if not isinstance(part, dict):
            continue
        pending.extend((f"{where}.{k}", v) for k, v in part.items() if isinstance(v, dict))
        if part.get("trust_remote_code") is not True:
            continue
        for key in ("checkpoint_dir", "path"):
            yield from ((where, path) for path in _named_paths(part.get(key)))


def _named_paths(folder: Any) -> Iterator[str]:
    """The dotted paths ``folder``'s ``config.json`` names (``longshort_family``, ``longshort_rope.method``), read
    as JSON; none of a folder that does not read."""
    try:
        config = json.loads((Path(str(folder)) / "config.json").read_text())
    except (OSError, ValueError):
        return
    rope = config.get("longshort_rope") if isinstance(config, dict) else None
    for path in (config.get("longshort_family") if isinstance(config, dict) else None,
                 rope.get("method") if isinstance(rope, dict) else None):
        if isinstance(path, str):
            yield path


def _strings(node: Any) -> Iterator[str]:
    """Every string value in ``node`` (the paths a config names itself)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _strings(value)


def _checked(cfg: Any, node: dict, as_here: dict, world_size: int, local: bool) -> RecipeConfig:
    try:
        config = _built(node, as_here, local)
        check_rules(config, world_size, local)
        if local:
            check_tokenizer(config)  # built as the setup builds it: a file of another format, ids past the model's
            check_overwrite(config, {k: written_path(cfg, k) for k in WRITTEN_FOLDERS})  # links there: as written
    except VocabBelowCharacters as e:  # the model node's key as the config has it (inside rope_scaled too)
        raise ValueError(e.worded(e.field, also=model_vocab_key(node))) from None
    except (ValueError, OSError) as e:  # a field whose value comes from another key: that key named too
        raise naming_the_source(e, cfg)
    return config


def _refuse_plus_keys(node: dict, local: bool) -> None:
    """``+loss.alhpa=0.2`` (Hydra's add-a-key syntax) on torchtune's command line: a top-level node ``+loss`` that
    nothing reads. Refused: a key misspelt under it (or a value refused) as the config check refuses it without the
    ``+`` (its close match named), then the ``+`` itself, in one line, each with the spelling to give."""
    merged, paths = plus_keys(node)
    if not paths:
        return
    try:
        _built(merged, torchtune_keys_as_here(merged), local=False)
    except ConfigKeyError as e:
        raise ConfigKeyError(f"{e} ({plus_message(paths)})") from None
    except ValueError as e:  # a value refused (+loss.alpha=-1): said with the '+', in one round, not two
        raise ValueError(f"{e} ({plus_message(paths)})") from None
    raise ConfigKeyError(plus_message(paths))


def _built(node: dict, as_here: dict, local: bool) -> RecipeConfig:
    """The typed config of ``node`` without the keys ``as_here``; a key misplaced by one level (``lora_rank`` at the
    top level, ``train_embeddings_and_norms`` in a model node) refused with the path that takes it."""
    try:
        return build_section(RecipeConfig, {k: v for k, v in node.items() if k not in as_here}, local=local)
    except (ConfigKeyError, ValueError) as e:  # (a ValueError: a rope_scaled node's key no RoPE method takes)
        keys, known, where = getattr(e, "refused", ((), (), ""))
        homes = key_homes(section_keys(RecipeConfig), node, keys, where)
        if homes:
            refuse_unknown(keys, known, where, homes)
        raise


__all__ = ["ConfigKeyError", "RecipeConfig", "check_built_model", "check_tokenizer", "check_tokenizer_vocab",
           "check_window_bos", "declared_vocab", "input_paths", "load_tokenizer", "model_key_of",
           "load_recipe_config", "resolved_config", "resolved_container", "written_names"]
