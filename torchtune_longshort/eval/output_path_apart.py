"""An ``--output_path`` that puts lm-eval's results among the files of the model it evaluates, refused before lm-eval
starts (:func:`~torchtune_longshort.config.inside_input.refuse_inside_input`, the recipe's rule).

lm-eval writes ``<output_path>/<name>/results_<date>.json`` and the samples beside it, ``<name>`` the sanitized
``peft=``, ``delta=`` or ``pretrained=`` of ``--model_args`` (the first of those given); for an ``--output_path``
ending ``.json``, ``<stem>_<date>.json`` and the samples in its folder. ``--output_path <model folder>``, a folder
inside it, or ``--output_path .`` beside ``pretrained=model`` (results in ``./model``) each wrote into the model's
folder: a later conversion or copy of it carried them, and an adapter folder held results files. So did one inside
a folder the run reads (:func:`evaluation_reads`): a user's ``--include_path`` of task YAMLs, or a local data folder of
``--metadata`` (``ppl_data_files`` reads a folder's ``.json`` files whole: the next run read the results as text).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from lm_eval._cli.utils import MergeDictAction

from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker
from lm_eval.utils import sanitize_model_name

from torchtune_longshort.config.inside_input import (glob_folders, refuse_glob_reads, refuse_inside_input,
                                                     tokenizer_input)
from torchtune_longshort.eval.cli_argv import MODEL_PATH_KEYS, option
from torchtune_longshort.eval.tasks import LOCAL_FILES_KEYS, TASK_FAMILIES, TEXT_PREFIXES, tasks_path

# --metadata keys that name what a run reads locally: data folders, files, globs, a local dataset folder, a model
METADATA_PATH_KEYS = (*(f.data_dir_key for f in TASK_FAMILIES.values() if f.data_dir_key), *LOCAL_FILES_KEYS,
                      "passkey_data_files", *(f"{p}_dataset_path" for p in TEXT_PREFIXES), "longbench_e_hf_path",
                      *MODEL_PATH_KEYS)


def results_folder(output_path: str, model_args: Dict[str, Any]) -> Optional[Path]:
    """The folder lm-eval writes its results and samples in for ``output_path`` and the parsed ``model_args`` (as
    its ``EvaluationTracker`` names it); None when lm-eval names it at random (no model path among the args)."""
    p = Path(output_path).expanduser()
    if p.suffix == ".json":
        return p.parent
    name = GeneralConfigTracker._get_model_name(model_args)
    return p / sanitize_model_name(name) if name else None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # a --metadata lm-eval cannot read: its own check refuses it, naming the option
        raise ValueError(message)


def _metadata(out: Sequence[str]) -> Dict[str, Any]:
    """``--metadata`` of ``out`` as lm-eval merges it (JSON or ``key=value``, each given), {} where it cannot."""
    parser = _Parser(add_help=False, allow_abbrev=False)
    parser.add_argument("--metadata", nargs="+", action=MergeDictAction, default=None)
    try:
        return parser.parse_known_args(list(out))[0].metadata or {}
    except ValueError:
        return {}


def evaluation_reads(out: Sequence[str], written: Optional[Path]) -> List[Tuple[str, str]]:
    """``(field, path)`` of what the evaluation ``out`` reads besides ``--model_args``: the task pack's folder and a
    user's ``--include_path`` (lm-eval indexes their YAMLs), and each local path of :data:`METADATA_PATH_KEYS`
    (a file of a tokenizer's folder its folder; a glob the folder of each file it matches where the results land in
    it, ``written``: a folder below it is refused only where the glob matches lm-eval's files, :func:`glob_reads`)."""
    reads = [("the task pack's folder", str(tasks_path()))]
    include = option(out, "--include_path")
    if include and Path(include).expanduser().resolve() != tasks_path():
        reads.append(("--include_path", include))
    for key, value in _metadata(out).items():
        if key not in METADATA_PATH_KEYS or not isinstance(value, (str, list)):
            continue
        for entry in [value] if isinstance(value, str) else [str(v) for v in value]:
            p = Path(entry).expanduser()
            if p.exists():
                whole = tokenizer_input(p) if key == "tokenizer" else p  # AutoTokenizer reads the folder whole
                field = f"--metadata {key}" if whole == p else f"the folder {{path}} of --metadata {key}={entry!r}"
                reads.append((field, str(whole)))
                continue
            reads += [(f"the folder {{path}} of --metadata {key}={entry!r}", str(d))
                      for d in glob_folders(entry, [written] if written is not None else [])]
    return reads


def written_files(output_path: str, written: Optional[Path]) -> List[Path]:
    """The files lm-eval writes for ``output_path`` in ``written`` (:func:`results_folder`; None: a folder it names
    itself, ``*``), as ``EvaluationTracker`` names them: ``results_<date>.json`` (``<stem>_<date>.json`` for an
    ``output_path`` ending ``.json``) and ``samples_<task>_<date>.jsonl``, each ``*`` text not known before it runs."""
    folder = written if written is not None else Path(output_path).expanduser() / "*"
    p = Path(output_path).expanduser()
    results = f"{p.stem}_*.json" if p.suffix == ".json" else "results_*.json"
    return [folder / results, folder / "samples_*_*.jsonl"]


def glob_reads(out: Sequence[str]) -> List[Tuple[str, str]]:
    """``(field, glob)`` of each local path of :data:`METADATA_PATH_KEYS` in ``out`` that names no file or folder:
    the tasks read what it matches."""
    globs = []
    for key, value in _metadata(out).items():
        if key in METADATA_PATH_KEYS and isinstance(value, (str, list)):
            globs += [(f"--metadata {key}", str(v)) for v in ([value] if isinstance(value, str) else value)
                      if not Path(str(v)).expanduser().exists()]
    return globs


def check_output_path_apart(out: Sequence[str], model_arg: Callable[[str], Optional[str]],
                            longshort: bool = False) -> None:
    """``ValueError`` when ``--output_path`` of ``out``, or the folder lm-eval writes in (:func:`results_folder`), is
    or lies inside what the run reads (:func:`evaluation_reads`) or a local path of ``--model_args``
    (``model_arg(key)``: its value as typed, for each of :data:`~.cli_argv.MODEL_PATH_KEYS`: the model, its adapter,
    its tokenizer), named by the key the user typed; for the ``longshort`` model, ``checkpoint_dir=`` is passed on as
    ``pretrained=`` (``cli_run.lm_eval_argv``), so it names lm-eval's folder too."""
    output_path = option(out, "--output_path")
    if not output_path:
        return
    typed = {key: value for key in MODEL_PATH_KEYS if (value := model_arg(key))}
    inputs = [(f"--model_args {key}", value) for key, value in typed.items() if Path(value).expanduser().exists()]
    named = dict(typed)
    if longshort and "pretrained" not in named and "checkpoint_dir" in named:
        named["pretrained"] = named["checkpoint_dir"]
    written = results_folder(output_path, named)
    if written is not None and (written.exists() or written.is_symlink()) and not written.is_dir():
        raise NotADirectoryError(f"--output_path {output_path!r}: {str(written)!r}, the folder lm-eval writes the "
                                 "results in (<output_path>/<model>/results_<date>.json), is a file, not a folder; "
                                 "move it aside or name another --output_path")
    inputs += evaluation_reads(out, written)
    refuse_inside_input("--output_path", output_path, inputs, "lm-eval's results", "which this evaluation reads",
                        writes_in=[written] if written is not None else [])
    for field, pattern in glob_reads(out):
        refuse_glob_reads("--output_path", output_path, field, pattern, written_files(output_path, written),
                          "lm-eval's results")
