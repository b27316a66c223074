"""Whether the model node matches what it is built from and fed with, asked before the output folder is claimed:
its explicit dimensions against the start checkpoint's ``config.json`` (:func:`check_checkpoint_dimensions`), its
vocabulary as the config declares it (:func:`declared_vocab`) against the tokenizer's (:func:`check_tokenizer_vocab`),
and ``window_bos`` against the tokenizer's BOS (:func:`check_window_bos`). :mod:`.rules` asks the first among the
rules between fields, and again the vocabulary once the model is built.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from torchtune_longshort.models.families import check_family_beside
from torchtune_longshort.models.family_builders import checkpoint_dims
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.training.recipe_config.paths import model_vocab_key
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig


def check_checkpoint_dimensions(config: RecipeConfig) -> None:
    """The model node's explicit dimensions against the start checkpoint's ``config.json`` (torch would list every
    tensor whose size differs, after the folder is claimed): the differing keys named, both values."""
    start = config.checkpointer.checkpoint_dir
    if start is None:
        return
    # deferred: torchtune (model_setup imports it; importing the config kit does not need it)
    from torchtune_longshort.training.model_setup import model_kwargs

    folder = CheckpointFolder.open(start)
    given = model_kwargs(config.model.args)
    theirs = checkpoint_dims(folder.config, str(folder.path / "config.json"))
    if given.get("num_kv_heads") is None and "num_heads" in given:
        theirs.pop("num_kv_heads")  # the builder's default follows num_heads, compared there
    differ = [k for k in theirs if given.get(k) is not None and given[k] != theirs[k]]
    if given.get("checkpoint_dir") is not None and given.get("family") is not None:  # the folder's, of its own
        check_family_beside(given["family"], str(folder.path), folder.config)
    if given.get("family") not in (None, folder.family.name):
        theirs["family"] = folder.family.name
        differ.insert(0, "family")
    if differ:
        raise ValueError(
            f"model dimensions differ from the start checkpoint checkpointer.checkpoint_dir={start!r}: "
            + ", ".join(f"model.{k}={given[k]!r} (its config.json: {theirs[k]!r})" for k in differ)
            + ". Set them to the checkpoint's, or give model.checkpoint_dir instead of family and dimensions: "
            "hf_decoder then reads them from the folder")


def declared_vocab(config: RecipeConfig) -> Tuple[Optional[int], str]:
    """``(vocabulary size, the field that says it)`` of the model the config builds, as far as the config says it
    before the build: the model node's ``vocab_size``, else the start checkpoint's ``config.json``; (None, "")."""
    # deferred: torchtune (model_setup imports it; importing the config kit does not need it)
    from torchtune_longshort.training.model_setup import model_kwargs

    vocab = model_kwargs(config.model.args).get("vocab_size")
    if isinstance(vocab, int):  # its key as the config has it (model.model.vocab_size inside rope_scaled)
        return vocab, f"{model_vocab_key({'model': config.model.args})}={vocab}"
    if config.checkpointer.checkpoint_dir is not None:
        folder = CheckpointFolder.open(config.checkpointer.checkpoint_dir)
        return folder.vocab_size, (f"vocab_size {folder.vocab_size} in the config.json of checkpointer.checkpoint_dir="
                                   f"{str(folder.path)!r}")
    return None, ""


def check_tokenizer_vocab(config: RecipeConfig, tokenizer: Any, model_vocab: Optional[int] = None,
                          how: str = "") -> None:
    """The tokenizer's ids fit the model's embedding table: ``model_vocab`` rows (``how`` names where that comes
    from), by default the size the config declares (:func:`declared_vocab`), so it is asked before the output
    folder is claimed."""
    if model_vocab is None:
        model_vocab, how = declared_vocab(config)
    tok_vocab = getattr(tokenizer, "vocab_size", None)
    if model_vocab is not None and tok_vocab is not None and tok_vocab > model_vocab:
        raise ValueError(f"tokenizer vocabulary ({tok_vocab} ids, tokenizer.path={config.tokenizer.path}) does not fit "
                         f"the model's embedding table ({model_vocab} rows: {how}): tokenizer and model do not match; "
                         "set tokenizer.path to the model's own tokenizer, or use a model (checkpoint_dir) with a "
                         "vocabulary that large")


def check_window_bos(config: RecipeConfig, tokenizer: Any) -> None:
    """``window_bos=True`` needs a BOS token to write: a tokenizer without one (Qwen2's) wrote nothing, silently."""
    if config.windows.window_bos and getattr(tokenizer, "bos_id", None) is None:
        raise ValueError(f"window_bos=True: the tokenizer (tokenizer.path={config.tokenizer.path}) has no BOS token "
                         "(Qwen2's have none), so no window can start with one; set window_bos=False (evaluation puts "
                         "no BOS before such a model's text either)")
