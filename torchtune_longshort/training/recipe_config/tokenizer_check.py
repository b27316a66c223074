"""The tokenizer against the model, before any side effect: the config check builds the ``tokenizer`` component as
the recipe's setup does (a SentencePiece, ``tokenizer.json`` or tiktoken file: well under a second, no weights
read) and asks the setup's own questions of it, so that ``longshort-validate`` says what ``tune run`` says.

* a file the component cannot read (a ``tokenizer.json`` given to torchtune's ``llama2_tokenizer``, a truncated
  file) is refused naming ``tokenizer.path`` and the component that reads that format;
* its vocabulary must fit the model's embedding table as the config declares it (the model node's ``vocab_size`` or
  the start checkpoint's ``config.json``: :func:`~.model_match.declared_vocab`);
* ``window_bos=True`` needs a BOS token.

A tokenizer the run would train (a component that trains its missing path, as the tiny configs' stdlib one) is not
trained here: its ``vocab_size`` argument is compared instead (SentencePiece trains exactly that many pieces; one
below what its text's characters need is refused by the component's ``check_training_arguments``, as the stdlib one's).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional

from torchtune_longshort.data.tokenizer_training import VocabBelowCharacters
from torchtune_longshort.disk_space import is_out_of_space, reason, room_then
from torchtune_longshort.models.tokenizer_files import TokenizerError
from torchtune_longshort.refusals import REFUSED, Refusal, capped, one_line
from torchtune_longshort.models.tokenizer_formats import checkpoint_tokenizer, find_tokenizer
from torchtune_longshort.training.recipe_config.components import CHECKPOINT_TOKENIZER, TokenizerConfig
from torchtune_longshort.training.recipe_config.paths import model_vocab_key
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig
from torchtune_longshort.training.recipe_config.model_match import (check_tokenizer_vocab, check_window_bos,
                                                                    declared_vocab)
from torchtune_longshort.config.values import resolve_component


def _format_hint(section: TokenizerConfig) -> str:
    """What reads the file ``tokenizer.path`` names when its component cannot: a Hugging Face ``tokenizer.json``
    (or any tokenizer folder of a checkpoint) is ``checkpoint_tokenizer``'s."""
    p = Path(str(section.path)).expanduser()
    component = resolve_component("tokenizer._component_", section.component)
    if component is not checkpoint_tokenizer and (p.suffix == ".json" or p.is_dir()):
        return (f"; a Hugging Face tokenizer.json (or a checkpoint folder) is read by tokenizer._component_: "
                f"{CHECKPOINT_TOKENIZER}")
    if component is not checkpoint_tokenizer and p.is_file():  # a .model file: SentencePiece or tiktoken, by content
        try:
            fmt, _ = find_tokenizer(p)
        except TokenizerError:
            return ""
        return f"; this file is a {fmt} tokenizer, read by tokenizer._component_: {CHECKPOINT_TOKENIZER} (any format)"
    return ""


def _raised_by_a_library(error: BaseException) -> bool:
    """Whether ``error`` (a ``ValueError``, say) was raised outside this package: tiktoken's "Error parsing line
    b'\\x0e' in .../tokenizer.model" for a SentencePiece file given to ``llama3_tokenizer`` went out as it was, no key
    named; this package's own refusals name theirs."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and not Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE)


_PACKAGE = Path(__file__).resolve().parents[2]


def load_tokenizer(section: TokenizerConfig, model_key: str = "model.vocab_size"):
    """The ``tokenizer`` component built (a folder trained first when the component trains a missing path); a file
    it cannot read (not a SentencePiece model, a truncated tiktoken file) is refused naming ``tokenizer.path``, not
    the library's traceback. ``model_key``: the model's vocabulary key to raise too (:func:`model_key_of`)."""
    # deferred: torchtune (importing the config kit does not need it)
    from torchtune import config

    try:
        return config.instantiate(section.node())
    except TokenizerError as e:  # the project's loaders name the file, not the key (a folder without EOS)
        if "tokenizer.path" in str(e):
            raise
        raise TokenizerError(f"tokenizer.path={section.path!r}: {one_line(e)}") from None
    except VocabBelowCharacters as e:  # a component training its path (the tiny configs'): tokenizer.vocab_size
        raise VocabBelowCharacters(e.vocab_size, e.needed, "tokenizer.vocab_size", also=model_key) from None
    except REFUSED as e:
        if not _raised_by_a_library(e):
            raise
        raise _unread(section, e) from e
    except Exception as e:  # sentencepiece's RuntimeError, tiktoken's, a JSON error of tokenizer.json
        if is_out_of_space(e):  # a folder the component trains, on a full disk: a write, not a file it cannot read
            have = room_then(e, section.path, "the write failed")  # as the training's writes found it
            raise TokenizerOutOfSpace(f"no space left on the disk training the tokenizer into tokenizer.path="
                                      f"{section.path!r} ({have}): {reason(e)}; free space there, or set "
                                      "tokenizer.path to a disk with room") from None
        raise _unread(section, e) from e


class TokenizerOutOfSpace(Refusal, RuntimeError):
    """The ``tokenizer`` component found no room writing the folder it trains (one line, exit status 2; the run's
    setup does not take it for ``output_dir``'s disk)."""


def model_key_of(config: RecipeConfig) -> str:
    """The model node's vocabulary key as the config gives it (``model.model.vocab_size`` inside ``rope_scaled``; ''
    when the start checkpoint gives the size), as the config check names it (:func:`~.paths.model_vocab_key`)."""
    return model_vocab_key({"model": config.model.args})


def _unread(section: TokenizerConfig, error: BaseException) -> ValueError:
    """The refusal of a file the component's library cannot read, its message on one line."""
    words = capped(one_line(error))
    return ValueError(f"tokenizer.path={section.path!r}: {section.component} cannot read it ({type(error).__name__}: "
                      f"{words}); name a tokenizer file of the format that component reads{_format_hint(section)}")


def _trained_vocab(section: TokenizerConfig) -> Optional[int]:
    """The vocabulary size of the tokenizer the component will train (its ``vocab_size`` argument, else its
    default); None when it takes none."""
    if isinstance(section.args.get("vocab_size"), int):
        return section.args["vocab_size"]
    try:
        component = resolve_component("tokenizer._component_", section.component)
        p = inspect.signature(component).parameters.get("vocab_size")
    except (TypeError, ValueError):
        return None
    return p.default if p is not None and isinstance(p.default, int) else None


def check_tokenizer(config: RecipeConfig) -> Optional[Any]:
    """The setup's tokenizer checks, before any side effect (see the module doc); the tokenizer built, or None when
    the run would train it."""
    section = config.tokenizer
    if section.path is None:
        return None
    trains = section.trains_here()
    if trains is not None:
        vocab = _trained_vocab(section)
        model_vocab, how = declared_vocab(config)
        if vocab is not None and model_vocab is not None and vocab > model_vocab:
            raise ValueError(f"tokenizer vocabulary ({vocab} ids: tokenizer.vocab_size={vocab}, trained at "
                             f"tokenizer.path={section.path}) does not fit the model's embedding table ({model_vocab} "
                             f"rows: {how}); set tokenizer.vocab_size to at most {model_vocab}, or use a model with a "
                             "vocabulary that large")
        return None
    tokenizer = load_tokenizer(section, model_key_of(config))
    check_tokenizer_vocab(config, tokenizer)
    check_window_bos(config, tokenizer)
    return tokenizer
