"""An ``--output_path`` that puts lm-eval's results among the files of the model it evaluates, refused before lm-eval
starts (:func:`~torchtune_longshort.config.inside_input.refuse_inside_input`, the recipe's rule).

lm-eval writes ``<output_path>/<name>/results_<date>.json`` and the samples beside it, ``<name>`` the sanitized
``peft=``, ``delta=`` or ``pretrained=`` of ``--model_args`` (the first of those given); for an ``--output_path``
ending ``.json``, ``<stem>_<date>.json`` and the samples in its folder. ``--output_path <model folder>``, a folder
inside it, or ``--output_path .`` beside ``pretrained=model`` (results in ``./model``) each wrote into the model's
folder: a later conversion or copy of it carried them, and an adapter folder held results files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional

from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker
from lm_eval.utils import sanitize_model_name

from torchtune_longshort.config.inside_input import refuse_inside_input
from torchtune_longshort.eval.cli_argv import MODEL_PATH_KEYS


def results_folder(output_path: str, model_args: Dict[str, Any]) -> Optional[Path]:
    """The folder lm-eval writes its results and samples in for ``output_path`` and the parsed ``model_args`` (as
    its ``EvaluationTracker`` names it); None when lm-eval names it at random (no model path among the args)."""
    p = Path(output_path).expanduser()
    if p.suffix == ".json":
        return p.parent
    name = GeneralConfigTracker._get_model_name(model_args)
    return p / sanitize_model_name(name) if name else None


def check_output_path_apart(output_path: Optional[str], model_arg: Callable[[str], Optional[str]],
                            longshort: bool = False) -> None:
    """``ValueError`` when ``--output_path``, or the folder lm-eval writes in (:func:`results_folder`), is or lies
    inside a local path of ``--model_args`` (``model_arg(key)``: its value as typed, for each of
    :data:`~.cli_argv.MODEL_PATH_KEYS`: the model, its adapter, its tokenizer), named by the key the user typed; for
    the ``longshort`` model, ``checkpoint_dir=`` is passed on as ``pretrained=`` (``cli_run.lm_eval_argv``), so it
    names lm-eval's folder too."""
    if not output_path:
        return
    typed = {key: value for key in MODEL_PATH_KEYS if (value := model_arg(key))}
    inputs = [(f"--model_args {key}", value) for key, value in typed.items() if Path(value).expanduser().exists()]
    named = dict(typed)
    if longshort and "pretrained" not in named and "checkpoint_dir" in named:
        named["pretrained"] = named["checkpoint_dir"]
    written = results_folder(output_path, named)
    refuse_inside_input("--output_path", output_path, inputs, "lm-eval's results", "which this evaluation reads",
                        writes_in=[written] if written is not None else [])
