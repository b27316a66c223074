"""The one rule that a command's output never lands among what it reads: an output folder that is, or lies inside, an
input (a model folder, a tokenizer, a data set, a results folder), or a folder the command writes in under its
output folder that is or lies inside one, is refused naming both, before anything is written.

The recipe (``output_dir``, its log and trace folders), the BABILong generator's ``--out``, ``longshort-eval``'s
``--output_path``, ``longshort-eval-report``'s ``--out``, the GGUF conversion's ``--out``,
``longshort-misalignment``'s ``--output`` and the study's ``--out`` and ``--report-dir`` ask it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, Optional, Tuple, Union

from torchtune_longshort.config.glob_match import glob_files, glob_meets

PathLike = Union[str, Path]


def _named(field: str, p: PathLike) -> str:
    """``field=path`` for an option or a key; ``field path`` for a description (``the model folder``); a field with
    ``{path}`` in it has the path put there (``the folder {path} of tokenizer.path='tok/t.json'``)."""
    if "{path}" in field:
        return field.replace("{path}", repr(str(p)))
    return f"{field} {str(p)!r}" if field.startswith("the ") else f"{field}={str(p)!r}"


def real_path(p: PathLike) -> Path:
    """``p`` with ``~`` expanded, absolute, its links followed as far as they lead: a loop of links is left as it is
    (``os.path.realpath``), not raised (``Path.resolve``'s RuntimeError, a traceback), and refused by the command's
    own check of its output folder (:func:`~torchtune_longshort.config.values.check_creatable`)."""
    return Path(os.path.realpath(Path(p).expanduser()))


def _relation(folder: Path, p: Path) -> str:
    """How ``folder`` stands to ``p`` (both resolved): ``is``, ``lies inside``, or ``""``."""
    return "is" if folder == p else "lies inside" if p in folder.parents else ""


def refuse_inside_input(name: str, value: PathLike, inputs: Iterable[Tuple[str, PathLike]], what: str,
                        reads: str = "which this run reads", writes_in: Iterable[PathLike] = ()) -> None:
    """``ValueError`` when the folder ``value`` (given as ``name``) is, or lies inside, an input of ``inputs``
    (``(field, path)``; an input file equal to ``value`` is left to the file check of ``name``), or when a folder
    the command writes ``what`` in (``writes_in``: under ``value``) is or lies inside one; ``reads`` says who
    reads the inputs. The line names both, and the fix."""
    real = real_path(value)
    inputs = [(field, p, real_path(p)) for field, p in inputs]
    for field, p, q in inputs:
        where = _relation(real, q)
        if where and not (where == "is" and q.is_file()):
            raise ValueError(f"{name}={str(value)!r} {where} {_named(field, p)}, {reads}: {what} would be written "
                             "among its files; name a folder outside it")
    for folder in writes_in:
        w = real_path(folder)
        for field, p, q in inputs:
            where = _relation(w, q)
            if where:
                raise ValueError(f"{name}={str(value)!r} writes {what} in {str(folder)!r}; that folder {where} "
                                 f"{_named(field, p)}, {reads}: they would be written among its files; name another "
                                 f"{name}")


# What makes a folder a model's, as transformers and PEFT load one (models/hf_checkpoint.py reads the same names):
# a config.json beside weights, or a PEFT adapter's config.
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")


def model_folder_at(path: PathLike) -> Optional[Path]:
    """The nearest of ``path`` and its parents that holds a model (a ``config.json`` beside its weights, or a PEFT
    ``adapter_config.json``), else None: a command that writes there mixes its files with the model's, which a later
    conversion into that folder (or a copy of the checkpoint) refuses or carries along."""
    real = real_path(path)
    for folder in (real, *real.parents):
        if folder.is_dir() and ((folder / "adapter_config.json").is_file() or (folder / "config.json").is_file()
                                and any(any(folder.glob(w)) for w in _WEIGHTS)):
            return folder
    return None


def refuse_inside_model(name: str, value: PathLike, what: str, itself: bool = True) -> None:
    """``ValueError`` when the folder ``value`` (given as ``name``) lies inside a model's folder
    (:func:`model_folder_at`), or is one (``itself``; a conversion replacing its own earlier folder asks without)."""
    real = real_path(value)
    model = model_folder_at(real if itself else real.parent)
    if model is not None:
        refuse_inside_input(name, value, [("the model folder", model)], what,
                            "which holds a model (its config.json and weights, or an adapter's)")


def glob_folders(pattern: str, lands: Iterable[PathLike]) -> List[Path]:
    """The folders of the files a glob ``pattern`` matches (:func:`~.glob_match.glob_files`, as the readers expand
    it) that a command's output must keep out of: those it writes in (``lands``). A folder below one is apart: what
    the command writes there is refused only where the pattern matches it (:func:`refuse_glob_reads`)."""
    matched = glob_files(pattern)
    real = {os.path.realpath(p) for p in lands}
    return [d for d in sorted({f.parent for f in matched}) if os.path.realpath(d) in real]


def refuse_glob_reads(name: str, value: PathLike, field: str, pattern: str, written: Iterable[PathLike],
                      what: str) -> None:
    """``ValueError`` when the glob ``pattern`` (given as ``field``) could match a file the command writes under
    ``value`` (``name``): ``written``, each a path whose ``*`` stands for text not known before it runs and a ``**``
    name for any folders (:func:`~.glob_match.glob_meets`); the next run would read it back. Files it can never
    match (``./**/*.txt`` beside ``.jsonl`` rows) leave ``value`` free, wherever it lies below the pattern."""
    for w in written:
        if glob_meets(pattern, w):
            raise ValueError(f"{name}={str(value)!r} writes {what} as {str(w)!r}, which {field}={pattern!r} matches: "
                             "the next run would read them back as its input; name a folder the pattern does not "
                             "reach")


def tokenizer_input(tokenizer: PathLike) -> Path:
    """What a command that reads ``tokenizer`` reads: a tokenizer file of a tokenizer's or model's folder (one that
    holds a ``tokenizer_config.json`` or ``config.json``) stands for that folder (AutoTokenizer reads it whole)."""
    tok = Path(tokenizer).expanduser()
    whole = tok.is_file() and any((tok.parent / f).is_file() for f in ("tokenizer_config.json", "config.json"))
    return tok.parent if whole else tok
