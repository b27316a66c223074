"""Tiny-run bootstrap: a SentencePiece tokenizer trained on the spot on the standard library's sources.

Used as the ``tokenizer`` component of the tiny configs, so the README's main job needs no download::

    tokenizer:
      _component_: torchtune_longshort.training.bootstrap.stdlib_sentencepiece_tokenizer
      path: outputs/tokenizers/stdlib_512
      vocab_size: 512

The tokenizer folder is trained once (a few seconds) and reused by later runs; its ids are identical in
sentencepiece, torchtune's ``llama2_tokenizer`` and transformers.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from torchtune_longshort.data.stdlib_corpus import stdlib_document, stdlib_dir, stdlib_source_files
from torchtune_longshort.config.values import integer
from torchtune_longshort.disk_space import note_room
from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.data.tokenizer_training import (
    MIN_VOCAB, VocabBelowCharacters, check_training_folder, pieces_needed, sentencepiece_file,
    train_sentencepiece,
)
from torchtune_longshort.made_folders import folder_beside, missing_root, remove_made_folders


def stdlib_sentencepiece_tokenizer(
    path: str,
    vocab_size: int = 512,
    train_files_limit: int = 120,
    max_seq_len: Optional[int] = None,
):
    """Return torchtune's ``llama2_tokenizer`` for ``path/tokenizer.model``, training it first if it is absent.

    Args:
        path: tokenizer folder, created (trained on stdlib sources, tests excluded) when it has no tokenizer.model;
            or an existing SentencePiece ``.model`` file, loaded as is.
        vocab_size: vocabulary size when training (ignored when the folder exists; the recipe checks the
            tokenizer against the model's vocabulary either way).
        train_files_limit: number of stdlib files used for training (sorted, deterministic).
        max_seq_len: passed to ``llama2_tokenizer``.
    """
    from torchtune.models.llama2 import llama2_tokenizer

    model_file = sentencepiece_file(path)
    folder, is_folder = model_file.parent, not Path(path).expanduser().is_file()
    # a folder trained by an earlier run, said once a process (the config check reads it too) and once read: a file
    # it cannot read is refused alone; a file the user named is loaded as is ("remove the folder" named its folder)
    reused = is_folder and model_file.is_file() and folder.resolve() not in _HELD
    if not model_file.is_file() and Path(path).suffix == ".model":
        # a tokenizer.model the user named (a base they bring): load it, never train a folder by that name
        raise FileNotFoundError(f"tokenizer path={str(path)!r}: no such SentencePiece file (pass a tokenizer folder "
                                "to train one there, or an existing .model file)")
    if not model_file.is_file():
        check_training_folder(folder)  # a folder of the user's is never trained into, nor replaced
        made = missing_root(folder)  # the folders this call makes (None: an empty folder of the user's, kept)
        with _training_turn(folder) as waited:  # torchrun's ranks, or runs started together: one trains
            if not model_file.is_file():
                _train_into(folder, model_file, made, vocab_size, train_files_limit)
            elif waited is not None:  # trained while this process waited its turn: read, not trained again
                _say(f"Tokenizer: {model_file} was trained by that process in the {waited:.1f} s this one waited; "
                     "using it")
            else:  # put in place between the look above and the lock
                _say(f"Tokenizer: {model_file} was trained by another process meanwhile (another rank of this run, "
                     "or a run started at the same time); using it")
    if is_folder:  # a tokenizer folder (trained here or not): read while we run
        _hold(folder)
    tokenizer = llama2_tokenizer(str(model_file), max_seq_len=max_seq_len)
    if reused:
        _say(f"Tokenizer: reusing {model_file}, already there (not trained again; its vocab_size is its own: "
             "remove the folder to train it anew)")
    return tokenizer


@contextlib.contextmanager
def _training_turn(folder: Path):
    """An exclusive flock on the tokenizer folder's parent while this process trains: each of torchrun's ranks
    builds the component, and every rank trained the same folder at once (twice the CPU, the losers saying 'put in
    place by another run'); now the first trains and the others find its folder when their turn comes. Yields the
    seconds this process waited for its turn (None: it did not wait); a wait is said when it starts, by
    rank 0 alone, as the trainer's own lines are (rank 1 training for rank 0 says nothing: rank 0 reports it)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder.parent, os.O_RDONLY)
    try:
        waited = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # said when the wait starts: rank 1 training said nothing, and rank 0 waited mute
            _say(f"Tokenizer: another process is training a tokenizer in {folder.parent} (another rank of this run, "
                 "or a run started at the same time); waiting for it ...")
            start = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            waited = time.monotonic() - start
        yield waited
    finally:
        os.close(fd)  # the lock goes with it


def _train_into(folder: Path, model_file: Path, made: Optional[Path], vocab_size: int, train_files_limit: int):
    """Train aside and rename, so that a process not taking :func:`_training_turn` never reads a half-written one."""
    tmp = folder_beside(folder, "training")
    try:
        files = stdlib_source_files(limit=train_files_limit, include_tests=False)
        _say(f"Tokenizer: training a SentencePiece BPE of {vocab_size} pieces on {len(files)} standard-library "
             f"files ({_size(files)}, tests excluded) under {stdlib_dir()}, into {folder} ...")
        start = time.monotonic()
        train_sentencepiece((stdlib_document(f) for f in files), tmp, vocab_size=vocab_size)
        if _move_into_place(tmp, folder, model_file):
            _TRAINED[folder.resolve()] = made.resolve() if made is not None else None
            _say(f"Tokenizer: trained in {time.monotonic() - start:.1f} s: {model_file}")
        else:
            _say(f"Tokenizer: {model_file} was put in place by another run meanwhile; using it")
    except BaseException as e:
        note_room(e, tmp)  # the room the training's writes found, before the cleanup below frees what they took
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # this call's own temporary folder, when not moved
        if folder.resolve() not in _TRAINED:
            remove_made_folders(folder, made)  # training failed or stopped: no empty folder of its stays


def _say(line: str) -> None:
    """One progress line, in the recipe's log (torchtune's logger), from a launch's rank 0 alone: read from the
    launcher's ``RANK``, as the config check builds the tokenizer before the process group exists (torchtune's
    ``log_rank_zero`` then took every rank for rank 0, and each said it)."""
    from torchtune import utils

    if launched_rank() == 0:
        utils.log_rank_zero(utils.get_logger("INFO"), line)


def _size(files) -> str:
    n = sum(f.stat().st_size for f in files)
    return f"{n / 2 ** 20:.1f} MiB" if n >= 2 ** 20 else f"{n / 1024:.0f} KiB"


# Tokenizer folders this process reads, each with a shared flock held until the process ends (a run started at the
# same time as another may load the folder the other trained), and those this process's own training put in place
# (with the outermost folder it made for it, itself or a parent; None: the folder was the user's, empty).
_HELD: Dict[Path, int] = {}
_TRAINED: Dict[Path, Optional[Path]] = {}


def _hold(folder: Path) -> None:
    key = folder.resolve()
    if key not in _HELD:
        fd = os.open(key, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH)
        _HELD[key] = fd


def trained_here(folder: Path) -> bool:
    """Whether this process's training put the tokenizer ``folder`` in place (a refused run removes it)."""
    return Path(folder).expanduser().resolve() in _TRAINED


def discard_trained_tokenizer(folder: Path) -> bool:
    """Remove the tokenizer ``folder`` of a refused run: only when this process's training put it in place and no
    other process reads it (a run started at the same time, with the same ``tokenizer.path``, that trained it or
    loaded this one: removing it would end that run at its first save). True when removed. A refused process that
    read the folder without training it (another rank of the same run) gives back its hold, so that the rank which
    trained it can remove it: it held the folder, and a 2-process run refused at setup left it every time."""
    key = Path(folder).expanduser().resolve()
    fd = _HELD.get(key)
    if key not in _TRAINED:
        if fd is not None:  # refused: this process reads it no more
            os.close(fd)
            del _HELD[key]
        return False
    if fd is None or not _exclusive(fd, DISCARD_WAIT_S):  # another process reads it
        return False
    made = _TRAINED.pop(key)
    for child in key.iterdir():  # what the training put there: the folder held nothing else
        with contextlib.suppress(OSError):
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    remove_made_folders(key, made)  # the folder itself and its parents, when this call made them
    os.close(fd)
    del _HELD[key]
    return True


# How long a refused run's trainer waits for the other ranks of its run, refused at the same point, to give the folder
# back (discard_trained_tokenizer); a run that reads it while it runs holds it longer, and the folder is kept.
DISCARD_WAIT_S = 0.5


def _exclusive(fd: int, wait_s: float) -> bool:
    """The exclusive flock of ``fd`` taken within ``wait_s`` seconds; False while another process holds it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _move_into_place(tmp: Path, folder: Path, model_file: Path) -> bool:
    """Rename the trained ``tmp`` to ``folder``; True when this call's folder is the one in place. When ``folder``
    exists: another process won the race (it holds ``tokenizer.model``: keep it), or it is empty (replace it with
    ``os.rmdir``, which removes nothing else); a folder that gained other files meanwhile is refused."""
    try:
        os.rename(tmp, folder)
    except OSError:
        if model_file.is_file():
            return False
        check_training_folder(folder)
        os.rmdir(folder)
        os.rename(tmp, folder)
    return True


def check_training_arguments(args: Mapping[str, Any], where: str) -> None:
    """The arguments a training call reads, checked before it (``where``: the tokenizer node's config path):
    ``train_sentencepiece`` refused ``vocab_size=-3`` without naming the key, and ``train_files_limit=0`` was
    refused as the stdlib corpus's ``limit``."""
    vocab = integer(MIN_VOCAB)(f"{where}.vocab_size", args.get("vocab_size", 512))
    limit = integer(1)(f"{where}.train_files_limit", args.get("train_files_limit", 120))
    # too few pieces for the files' characters: sentencepiece's own count (a fraction of a second), not a training
    needed = _pieces_needed(limit)
    if needed is not None and vocab < needed:
        raise VocabBelowCharacters(vocab, needed, f"{where}.vocab_size", also="model.vocab_size")


@functools.lru_cache(maxsize=8)
def _pieces_needed(limit: int) -> Optional[int]:
    """:func:`pieces_needed` of the first ``limit`` stdlib files the tokenizer trains on (once a process)."""
    return pieces_needed(stdlib_document(f) for f in stdlib_source_files(limit=limit, include_tests=False))


# The recipe's config check asks these: a missing ``path`` is trained, so it must only be creatable, and the
# training's arguments must be ones it takes (training.recipe_config.components.TokenizerConfig).
stdlib_sentencepiece_tokenizer.trains_missing_path = True
stdlib_sentencepiece_tokenizer.check_training_arguments = check_training_arguments
