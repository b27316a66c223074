"""What a recipe config reads and where it writes, so that ``overwrite_output_dir=True`` never deletes an input.

The inputs are every local file or folder the run reads: the fields that name one (start checkpoint, tokenizer,
the data files of a source) and any string argument of any component that names an existing path (a Qwen2
tokenizer's ``merges_file``, a model node's own checkpoint folder, a sampler's file): a component's second file is
an input as much as its ``path``. The metric logger and the profiler write, and the checkpointer's ``output_dir`` is the
run's own folder: none is an input.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any, Iterator, List, Mapping, Optional, Tuple

from torchtune_longshort.training.checkpointing import LATEST, RECIPE_STATE_DIR
from torchtune_longshort.training.equal_compute import trained_steps
from torchtune_longshort.training.output_dir import check_output_dir
from torchtune_longshort.training.written_files import HERE, METRICS_FILE, WRITTEN_HERE
from torchtune_longshort.config.fields import ComponentSection
from torchtune_longshort.config.inside_input import refuse_glob_reads, refuse_inside_input, tokenizer_input
from torchtune_longshort.config.values import UnwritablePath, check_creatable, refuses_writes
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig

# Component arguments that name where a run writes, not what it reads.
_OUTPUT_ARGS = ("output_dir", "log_dir")
# The folders besides output_dir that the run writes into, by config key
WRITTEN_FOLDERS = ("metric_logger.log_dir", "profiler.output_dir")


def _existing_path(value: str) -> Any:
    try:
        p = Path(value).expanduser()
        return p if value.strip() and p.exists() else None
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: not a path
        return None


def _named_paths(value: Any, where: str) -> Iterator[Tuple[str, Path]]:
    """``(field, path)`` of every string inside ``value`` (nested nodes and lists) that names an existing path."""
    if isinstance(value, str):
        p = _existing_path(value)
        if p is not None:
            yield where, p
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "_component_" and k not in _OUTPUT_ARGS:
                yield from _named_paths(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _named_paths(v, f"{where}[{i}]")


def _components(config: RecipeConfig) -> Iterator[Tuple[str, ComponentSection]]:
    for name in ("tokenizer", "model", "checkpointer", "loss", "optimizer", "lr_scheduler", "position_sampler",
                 "dataset"):
        section = getattr(config, name)
        if section is not None:
            yield name, section
    if config.validation is not None:
        yield "validation.dataset", config.validation.dataset


def input_paths(config: RecipeConfig) -> List[Tuple[str, Path]]:
    """``[(field, path)]`` of every local file or folder the run reads (see the module doc)."""
    out: List[Tuple[str, Path]] = []
    for field, value in (("checkpoint_dir", config.checkpoint_dir),
                         ("checkpointer.checkpoint_dir", config.checkpointer.checkpoint_dir),
                         ("tokenizer.path", config.tokenizer.path)):
        if value:  # named even before it exists: a tokenizer trained there is read by this run
            out.append((field, Path(value).expanduser()))
    out += config.dataset.input_files("dataset")
    if config.validation is not None:
        out += config.validation.dataset.input_files("validation.dataset")
    for where, section in _components(config):
        out += _named_paths(section.args, where)
    seen, unique = set(), []
    for field, p in out:
        if (field, str(p)) not in seen:
            seen.add((field, str(p)))
            unique.append((field, p))
    return unique


def written_names(config: RecipeConfig) -> Tuple[str, ...]:
    """Top-level names inside ``output_dir`` that the run writes besides the recipe's own: the metric logger's
    ``log_dir`` and the profiler's trace folder (:attr:`RecipeConfig.trace_dir`) when they lie there, or
    :data:`~torchtune_longshort.training.written_files.HERE` when one is ``output_dir`` itself."""
    out = Path(config.output_dir).expanduser().resolve()
    names = []
    for folder in (config.metric_logger.log_dir, config.trace_dir):
        if not folder:
            continue
        p = Path(folder).expanduser().resolve()
        name = HERE if p == out else p.relative_to(out).parts[0] if out in p.parents else None
        if name is not None and name not in names:
            names.append(name)
    return tuple(names)


def folders_apart(inputs: List[Tuple[str, Path]]) -> List[Tuple[str, Path]]:
    """``inputs`` (:func:`input_paths`), a ``tokenizer.path`` file of a tokenizer's or model's folder standing for
    that folder (:func:`~torchtune_longshort.config.inside_input.tokenizer_input`, as the BABILong generator reads
    it): what no output folder may be or lie inside."""
    out = []
    for field, p in inputs:
        folder = tokenizer_input(p) if field == "tokenizer.path" else p
        out.append((field, p) if folder == p else (f"the folder {{path}} of {field}={str(p)!r}", folder))
    return out


def _refuse_inside_input(name: str, folder: str, inputs, what: str) -> None:
    """``folder`` (a field the run writes to) that is, or lies inside, one of ``inputs``: refused naming both."""
    refuse_inside_input(name, folder, inputs, what)


def refuse_glob_read_back(config: RecipeConfig, inputs: List[Tuple[str, Path]]) -> None:
    """A data glob of ``inputs`` (a ``path`` that names no file: ``dataset.path='./**/*.txt'``) that could match a
    file the run writes: refused naming both, as the next run would train on it (the metric logger's
    ``log_<time>.txt``). In ``output_dir`` the run writes the names of :data:`WRITTEN_HERE`, and any file below them
    and ``step_<k>`` (a tokenizer's copy); in the log and trace folders any name (a logger's)."""
    out = Path(config.output_dir).expanduser()
    own = [*(out / n for n in WRITTEN_HERE), *(out / n / "**" / "*" for n in (*WRITTEN_HERE, "step_*"))]
    writes = [("output_dir", config.output_dir, own),
              *((name, folder, [Path(folder).expanduser() / "**" / "*"]) for name, folder in
                (("metric_logger.log_dir", config.metric_logger.log_dir), ("profiler.output_dir", config.trace_dir))
                if folder)]
    for field, p in inputs:
        if not p.exists() and glob.has_magic(str(p)):
            for name, folder, written in writes:
                refuse_glob_reads(name, folder, field, str(p), written, "the run's files")


def check_overwrite(config: RecipeConfig, as_written: Optional[Mapping[str, Optional[Path]]] = None) -> None:
    """The output folder's rules (:func:`~torchtune_longshort.training.output_dir.check_output_dir`), asked
    before anything is built: an output folder (or a log folder) inside an input, an existing folder without
    ``resume`` / ``overwrite_output_dir``, a resume with no checkpoint, and an overwrite that would delete an input,
    the working directory, ``$HOME`` or anything the recipe did not write are refused naming the field and the
    path; so is a resume whose log or trace folder, as the config writes it (``as_written``, by
    :data:`WRITTEN_FOLDERS` key), lies inside ``output_dir`` through a symbolic link there."""
    out = Path(config.output_dir).expanduser()
    trained = config.tokenizer.trains_here()
    if trained is not None and (trained.resolve() == out.resolve() or out.resolve() in trained.resolve().parents):
        raise ValueError(f"tokenizer.path={str(config.tokenizer.path)!r} lies inside output_dir="
                         f"{str(config.output_dir)!r}: the tokenizer trained there would fill output_dir before the "
                         "run claims it (and an overwrite would delete it); name a tokenizer folder outside output_dir")
    inputs = input_paths(config)
    apart = folders_apart(inputs)
    log_dir = config.metric_logger.log_dir
    _refuse_inside_input("output_dir", config.output_dir, apart, "the run's checkpoints and logs")
    if log_dir:
        _refuse_inside_input("metric_logger.log_dir", log_dir, apart, "the logs")
    if config.trace_dir:
        _refuse_inside_input("profiler.output_dir", config.trace_dir, apart, "the profiler's traces")
    refuse_glob_read_back(config, inputs)
    check_output_dir(out, resume=config.resume, overwrite=config.overwrite_output_dir, protect=inputs,
                     written_here=written_names(config),
                     max_steps=trained_steps(config.max_steps, config.equal_compute_overhead, config.loss.alpha))
    if config.resume:
        _refuse_linked_folders(out.resolve(), [(f, (as_written or {}).get(f)) for f, used in zip(
            WRITTEN_FOLDERS, (log_dir, config.trace_dir)) if used])
    # the folders the run makes or writes into, asked in the order it makes them (an existing folder that takes no
    # new file ended in a traceback: at the lock, or at the logger once the run had claimed its folder)
    check_creatable("output_dir", config.output_dir, writable=True)
    check_own_entries(out, log_dir)
    if log_dir:
        check_creatable("metric_logger.log_dir", log_dir, writable=True)
    if config.trace_dir:
        check_creatable("profiler.output_dir", config.trace_dir, writable=True)


def _refuse_linked_folders(out: Path, folders) -> None:
    """A resume's: a folder the run writes into (``(field, path as the config writes it)``) that lies inside ``out``
    through a symbolic link at its top (a ``logs`` link to a user's folder) is refused, as the overwrite refuses that
    link: the resumed run wrote its ``log_<time>.txt`` through it into the user's folder. ``out`` is resolved; the
    written path's folders above the entry are resolved before they are compared with it (a path spelled through a
    link to a folder above the run, as ``/tmp`` is on macOS, names the same entry)."""
    for field, written in folders:
        entry = next((p for p in ([written, *written.parents] if written is not None else ())
                      if p.parent != p and p.parent.resolve() == out), None)
        if entry is not None and entry.is_symlink():
            raise FileExistsError(
                f"resume=True: {entry} is a symbolic link, where the recipe writes {field}={str(written)!r} (a "
                f"folder of the run's): move it out of {out}, then resume (a fresh {entry.name}/ is started)")


def check_own_entries(out: Path, log_dir: Any) -> None:
    """The entries of an existing run in ``out`` that this run writes into (its resume, or an overwrite that deletes
    them first) take writes: ``recipe_state/`` (each save's state), the log folder when it lies in ``out``, ``latest``
    and ``metrics.jsonl``. One that does not (``chattr +i``, a permission) ended a resume at its first save, after
    steps were trained, in a raw ``Operation not permitted``; refused naming it and the fix."""
    entries = [(out / RECIPE_STATE_DIR, "each save's optimizer and data state")]
    if log_dir and out.resolve() in Path(log_dir).resolve().parents:
        entries.append((Path(log_dir), "the metric logger's files"))
    entries += [(out / LATEST, "the newest step's name"), (out / METRICS_FILE, "each step's metrics")]
    for path, what in entries:
        why = refuses_writes(path) if path.exists() and not path.is_symlink() else None
        if why:
            name = path.resolve().relative_to(out.resolve()).as_posix() + ("/" if path.is_dir() else "")
            raise UnwritablePath(f"output_dir={str(out)!r}: its {name} does not take writes ({why}), and this run "
                                 f"writes {what} there; make it writable (chmod u+w {str(path)!r}; chattr -i if it is "
                                 "immutable), then run again")
