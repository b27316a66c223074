"""Run lm-eval's CLI in this process (the ``longshort`` model registered) and read back its results JSON.

Same code path as ``longshort-eval`` (``python -m torchtune_longshort.eval``); useful from scripts, notebooks and tests
that want the CLI's behaviour without paying the interpreter start-up and imports again.
"""

from __future__ import annotations

import json
import logging
import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from torchtune_longshort._quiet import quiet_upstream
from torchtune_longshort.config.values import check_creatable
from torchtune_longshort.devices import default_device, require_device
from torchtune_longshort.eval.cli_argv import (asks_help, canonical_options, check_batch_size, check_max_batch_size,
                                               check_option_pairs, check_option_values, check_verbosity, flag_given,
                                               hf_auto_schedule_floored, home_expanded, option)
from torchtune_longshort.eval.cli_messages import tidy_task_lists
from torchtune_longshort.eval.config_file import config_options, device_given_as
from torchtune_longshort.eval.console_log import setup_cli_logging
from torchtune_longshort.eval.length_fit import check_lengths_fit
from torchtune_longshort.eval.model_args_argv import (json_fix, model_args_item, model_args_value,
                                                     renamed_model_args_key, without_model_args_key)
from torchtune_longshort.eval.model.args import batch_sizes, check_model_fits, parse_model_args
from torchtune_longshort.eval.model.chat import (lacks_template, no_template_message, select_template, template_name,
                                                 template_tokenizer)
from torchtune_longshort.eval.model.generation import not_greedy, unreadable_value
from torchtune_longshort.eval.other_model_args import check_other_model_args, refuse_missing_folder
from torchtune_longshort.eval.results_written import SavedResults, check_output_room
from torchtune_longshort.eval.task_faults import contained  # a task that raises: NaN, the others scored
from torchtune_longshort.eval.trust_args import trusts_remote_code
from torchtune_longshort.eval.report.run_files import results_files, samples_of  # noqa: F401  (samples_of: for scripts)
from torchtune_longshort.eval.tasks import (check_metadata_values, check_task_lengths, fixed_context_of, generates,
                                          tasks_path, unknown_metadata_keys)
from torchtune_longshort.eval.tasks.common.lengths import METADATA_KEY
from torchtune_longshort.eval.tasks.common.unavailable import MODEL_KEY, TaskDataError
from torchtune_longshort.lengths import parse_lengths
from torchtune_longshort.models.hf_rope import not_representable_method
from torchtune_longshort.rope.checkpoint_code import checkpoint_code

logger = logging.getLogger(__name__)

_SUBCOMMANDS = ("run", "ls", "validate")

# --metadata keys the pack reads besides its tasks' own: the model's tokenizer (tasks that count tokens: long_text's
# tokenizer_from_metadata) and the lm-eval model of the run (set here)
METADATA_ALSO = ("tokenizer", "checkpoint_dir", "pretrained", MODEL_KEY)


def lm_eval_argv(args: Sequence[str]) -> List[str]:
    """``args`` as lm-eval's CLI gets them from this wrapper:

    - the keys of a ``--config`` YAML that the wrapper reads (``model``, ``metadata``, ...) and the command line
      does not give are put on the command line (:func:`torchtune_longshort.eval.config_file.config_options`);
    - ``run``, ``ls`` and ``validate`` (and the legacy form without a subcommand) get ``--include_path`` of the
      installed task pack (:func:`torchtune_longshort.eval.tasks.tasks_path`) unless the user names one: a user's
      own folder is indexed beside the pack (:mod:`torchtune_longshort.eval.task_index`; lm-eval's option takes one
      folder);
    - an evaluation without ``--device`` gets ``cuda`` only when CUDA is available, else ``cpu`` (lm-eval's
      default is ``cuda:0`` whatever the machine); a ``--device`` (or ``--model_args device=``) this machine does
      not have is refused here, for every model (:func:`torchtune_longshort.devices.require_device`: lm-eval's
      ``hf`` would fail later, and no model may run elsewhere than its results say), and a device given both ways
      is refused (lm-eval would pass the model ``device`` twice); a ``--model_args device=`` alone is passed as
      ``--device`` (lm-eval passes its own default ``cuda:0`` beside it otherwise), and so are ``batch_size`` and
      ``max_batch_size``;
    - an ``--output_path`` where a file lies, or that cannot be created, and an ``--include_path`` that does not
      exist are refused (lm-eval would evaluate, then only warn that it could not save, or find no task);
    - an evaluation gets ``--metadata`` key ``lm_eval_model`` naming the ``--model`` (lm-eval's default ``hf``
      when none is given), so that a task that needs the ``longshort`` model (``longshort_misalignment``) refuses
      any other before a request runs, and tasks can refuse requests a plain model would cut or crash on
      (``torchtune_longshort.eval.tasks.common.unavailable``);
    - ``checkpoint_dir=`` in the ``longshort`` model's ``--model_args`` is given as ``pretrained=``: lm-eval 0.4.13
      names the results folder (``<output_path>/<name>/results_*.json``) after ``pretrained`` in model_args, and
      gives any other model a random name; ``checkpoint_dir`` is ``pretrained``'s older name here, so the folder
      is named after the checkpoint whichever of the two a user types, exactly as for ``hf``.
    """
    out = [str(a) for a in args]
    help_only = asks_help(out)
    out = out if help_only else canonical_options(out)  # ls and validate by their own options
    if not help_only and out[0] not in _SUBCOMMANDS[1:]:
        out = home_expanded(tidy_task_lists(out))
        out = home_expanded(config_options(out, option(out, "--config")))  # the YAML's output_path too
    evaluating = not help_only and (out[0] == "run" or out[0] not in _SUBCOMMANDS)
    if not help_only:
        given = option(out, "--include_path")
        if given is None:
            out += ["--include_path", str(tasks_path())]
        elif not Path(given).expanduser().exists():
            raise FileNotFoundError(f"--include_path {given!r} does not exist: name a folder of task YAMLs (or leave "
                                    "it out: the installed task pack is included)")
        elif Path(given).expanduser().resolve() != tasks_path():
            from torchtune_longshort.eval.task_index import say_included  # deferred: lm_eval (its task index)
            say_included(out, given)
    if not evaluating:
        return out
    model = option(out, "--model")
    check_option_values(out)  # --seed, --limit, --samples...: lm-eval's parser named its type function
    _check_model_batch_size(option(out, "--batch_size"), f"--batch_size {option(out, '--batch_size')}", model)
    _check_output_path(option(out, "--output_path"))
    from torchtune_longshort.eval.output_path_apart import check_output_path_apart  # deferred: lm_eval (its tracker)
    check_output_path_apart(out, lambda key: model_args_value(out, key), model == "longshort")
    check_verbosity(option(out, "--verbosity"))
    _check_integrity_runnable(out)
    out = _model_options(out, args, model)
    out += ["--metadata", json.dumps({MODEL_KEY: model or "hf"})]
    if model != "longshort":
        _refuse_unrepresentable(out, model or "hf")
        return out
    return renamed_model_args_key(out, "checkpoint_dir", "pretrained")


def _model_options(out: List[str], args: Sequence[str], model: Optional[str]) -> List[str]:
    """``out`` with ``batch_size``, ``max_batch_size`` and ``device`` of ``--model_args`` moved to lm-eval's options
    (given both ways: refused), and the device checked on this machine (:func:`lm_eval_argv`); ``args`` as typed."""
    # lm-eval 0.4.13 passes its own --device (default cuda:0), --batch_size (default 1) and --max_batch_size to the
    # model whatever the command line says: one of them in --model_args too reached the model twice (TypeError), for
    # hf too; it goes as the option instead, and given both ways it is refused
    for key in ("batch_size", "max_batch_size", "device"):
        flag, in_args = option(out, f"--{key}"), model_args_value(out, key)
        if in_args is None:
            continue
        if flag is not None:
            raise ValueError(f"--{key} {flag} and {model_args_item(out, key)}: give it once (--{key})")
        if key == "batch_size":
            _check_model_batch_size(in_args, f"--model_args batch_size={in_args}", model)
        if key == "max_batch_size":
            check_max_batch_size(in_args, f"--model_args max_batch_size={in_args}")
        out = without_model_args_key(out, key) + [f"--{key}", in_args]
    device = option(out, "--device")
    if device is None:
        out += ["--device", default_device()]
    else:
        typed = canonical_options(args)  # as typed: --model_a, -a, --model_args=
        in_args, config = model_args_value(typed, "device"), option(out, "--config")
        if in_args is None and option(typed, "--device") is None and config is not None:
            require_device(device, *device_given_as(config))  # the YAML's
        require_device(device, "--device" if in_args is None else "--model_args device",
                       json_fix(typed, "device", "cpu"))  # "device": "cpu" when --model_args gave it as JSON
    return out



def _check_model_batch_size(value: Optional[str], given_as: str, model: Optional[str]) -> None:
    """:func:`check_batch_size`, and with ``--model longshort`` what its model takes (:func:`batch_sizes`: ``auto:N``
    with a whole ``N``): ``--batch_size auto:2.5``, which ``hf`` reads, passed the flag's check and the model then
    refused it naming ``batch_size=`` of its arguments. One line starting with ``given_as``."""
    check_batch_size(value, given_as)
    if model != "longshort" or value is None:
        return
    try:
        batch_sizes(value, None)
    except ValueError:
        raise ValueError(f"{given_as}: the longshort model takes a whole number (e.g. 8), auto, or auto:N with N a "
                         "whole number, 1 or more (auto:4: back to --max_batch_size at 4 points of each request list)"
                         ) from None


def check_arguments(out: List[str]) -> None:
    """For an evaluation (``out``: :func:`lm_eval_argv`'s), what lm-eval would find wrong only after its start-up log
    and task loading, or never, refused before it starts:

    - with ``--model longshort``, the model's arguments, checked as its constructor checks them (every key, the
      device, the checkpoint folder, its tokenizer, the RoPE spec and the length; no weight is read); with another
      model, a ``pretrained=`` path that is no folder;
    - when every task is the pack's, a ``--metadata`` key none of them reads (``max_seq_length`` for
      ``max_seq_lengths``: lm-eval passes it on, and the tasks ran at their default lengths);
    - ``--gen_kwargs temperature=abc`` (a value lm-eval cannot read), and with ``--model longshort``
      ``do_sample=true`` (or a temperature without it, or beams...), when a task of the run may generate
      (:func:`_check_gen_kwargs`); lm-eval's rules between options (:func:`check_option_pairs`); lengths past an
      explicit max_length (:func:`~.length_fit.check_lengths_fit`)."""
    if asks_help(out) or out[0] in _SUBCOMMANDS[1:]:
        return
    check_option_pairs(out)
    check_output_room(option(out, "--output_path"))
    # deferred: lm_eval (its CLI parses these options; the callers have imported it already)
    from lm_eval._cli.utils import MergeDictAction

    from torchtune_longshort.eval.task_index import include_path_covers, task_names

    parser = _OneLineParser(add_help=False, allow_abbrev=False)  # else "--model" would read as --model_args
    parser.add_argument("--model_args", "-a", nargs="+", action=MergeDictAction, default=None)
    parser.add_argument("--metadata", nargs="+", action=MergeDictAction, default=None)
    parser.add_argument("--gen_kwargs", nargs="+", action=MergeDictAction, default=None)
    parser.add_argument("--apply_chat_template", type=str, nargs="?", const=True, default=False)  # as lm-eval's
    given = parser.parse_known_args(out)[0]
    if include_path_covers(out, str(tasks_path())):  # every task the pack's: their metadata keys are known
        bad, why = unknown_metadata_keys(given.metadata or {}, also=METADATA_ALSO, tasks=task_names(out))
        if bad:
            raise ValueError(f"--metadata key(s) {bad}: {why}")
        for key, value in (given.metadata or {}).items():  # lengths: refused at task building, after lm-eval's log
            if str(key).endswith(METADATA_KEY) and value not in (None, "", []):  # unset: the task's default
                parse_lengths(value, f"--metadata {key}")
        try:  # a value a task would score NaN for (the run exited 0)
            check_metadata_values(given.metadata or {})
            check_task_lengths(given.metadata or {}, task_names(out))
        except TaskDataError as e:
            raise ValueError(f"--metadata {e}") from None
    if "longshort_passkey" in task_names(out):  # a local haystack too short: NaN once the model had loaded
        # deferred: lm_eval (the task module pulls it and datasets in: seconds of start-up other runs need not pay)
        from torchtune_longshort.eval.tasks.passkey.task import check_haystack_fills

        try:
            check_haystack_fills({**(given.model_args or {}), **(given.metadata or {})})
        except TaskDataError as e:
            raise ValueError(f"--metadata {e}") from None
    model, run_limit = option(out, "--model") or "hf", None
    _check_gen_kwargs(given.gen_kwargs or {}, model, task_names(out))
    if model == "longshort":
        passed = {key: option(out, f"--{key}") for key in ("device", "batch_size", "max_batch_size")}
        if flag_given(out, "--trust_remote_code"):  # lm-eval adds it to the model's arguments
            passed["trust_remote_code"] = True
        args = parse_model_args(**{**(given.model_args or {}), **{k: v for k, v in passed.items() if v is not None}})
        check_model_fits(args)  # a length whose RoPE tables no memory holds (meta build: nothing allocated)
        run_limit = args.run_limit
        _check_use_cache(out, model, args)
        if flag_given(out, "--apply_chat_template"):
            chat = template_tokenizer(args.tokenizer.path)
            if chat is None and not _every_task_ignores(task_names(out), "apply_chat_template"):
                raise ValueError(no_template_message(args.tokenizer.path))
            if chat is not None:  # a name its named templates lack (lm-eval asks the model for it whatever the tasks)
                select_template(chat.chat_template, template_name(given.apply_chat_template), args.tokenizer.path)
    elif (given.model_args or {}).get("pretrained") is not None:
        refuse_missing_folder(str(given.model_args["pretrained"]), model, given.model_args.get("revision"),
                              given.model_args.get("subfolder"))
        # hf: transformers' "Cannot use chat template functions ..." came once the model had loaded, with no fix
        tokenizer = Path(str(given.model_args.get("tokenizer") or given.model_args["pretrained"])).expanduser()
        if model == "hf" and tokenizer.exists() and flag_given(out, "--apply_chat_template") and \
                not _every_task_ignores(task_names(out), "apply_chat_template") and lacks_template(tokenizer):
            raise ValueError(no_template_message(tokenizer))
        name = template_name(given.apply_chat_template) if model == "hf" and tokenizer.exists() else None
        chat = template_tokenizer(tokenizer) if name is not None else None
        if chat is not None and isinstance(chat.chat_template, dict):  # hf raised it once the model had loaded
            select_template(chat.chat_template, name, tokenizer)
    if model != "longshort":  # longshort refuses what it does not take itself
        check_other_model_args(given.model_args or {}, model)
        _check_use_cache(out, model, None)
    check_lengths_fit(given.metadata or {}, task_names(out), model, given.model_args or {}, run_limit)


def _check_gen_kwargs(gen_kwargs: Dict[str, Any], model: str, tasks: List[str]) -> None:
    """``--gen_kwargs`` refused before lm-eval starts where a task of the run may generate (lm-eval gives the others
    none): a value lm-eval cannot read, under any model (:func:`~.model.generation.unreadable_value`), and with
    ``--model longshort`` sampling, beams, penalties (:func:`~.model.generation.not_greedy`: hf's generate honours
    them, the longshort model decodes greedily only). Both ended the run at its first generation, after the model
    had loaded and any earlier task had run (exit 2)."""
    if not any(generates(n) for n in tasks):
        return
    why = unreadable_value(gen_kwargs) or (not_greedy(gen_kwargs) if model == "longshort" else "")
    if why:
        raise ValueError(f"--gen_kwargs {why}")


def _check_use_cache(out: List[str], model: str, args: Optional[Any]) -> None:
    """A ``--use_cache`` whose files hold another model's answers, refused before the model loads
    (:func:`~.model.response_cache.check_cache_files`): lm-eval keys them on the request alone and replays them.
    ``args``: the ``longshort`` model's parsed arguments, whose identity (the checkpoint fingerprint: file sizes and
    times, no weight read) is the one the model signs with; None for another model, refused a cache one signed."""
    use_cache = option(out, "--use_cache")
    if use_cache is None:
        return
    # deferred: lm_eval (its CachingLM's hashing; the callers have imported it already)
    from torchtune_longshort.eval.model.response_cache import cache_identity, check_cache_files

    check_cache_files(use_cache, None if args is None else cache_identity(args, args.folder.fingerprint()), model)


class _OneLineParser(ArgumentParser):
    """lm-eval's ``key=value`` options as its parser reads them, an error raised as one line (``ValueError``): it
    printed this parser's usage block first; a ``--model_args`` value split at a comma (a path ``runs 1,2``) is told
    how to pass it."""

    def error(self, message: str):
        if message.startswith("argument --model_args: expected `key=value`"):
            message += ("; each ',' starts another key=value, so a value holding a comma (a path) is cut there: give "
                        "the option as JSON, e.g. --model_args '{\"pretrained\": \"/runs 1,2/step_2\"}'")
        raise ValueError(message)


def _every_task_ignores(names: List[str], key: str) -> bool:
    """Whether every task of ``names`` (a run's) is a family of the pack that ignores the lm-eval option ``key``
    (``TaskFamily.fixed_context``: a chat template for a run of ``longshort_ppl`` alone is ignored, with its
    warning, so the tokenizer need not have one)."""
    return bool(names) and all(key in fixed_context_of(n) for n in names)


def _refuse_unrepresentable(out: List[str], model: str) -> None:
    """Refuse a ``pretrained=`` folder whose RoPE transformers cannot run (CLEX's ODE, EABF's query factor: its
    config.json's ``rope_type`` says ``longshort-<method> (not representable ...)``) for a model other than
    ``longshort``, before lm-eval starts: transformers would raise a ``KeyError`` traceback while building it."""
    pretrained = model_args_value(out, "pretrained")  # either spelling of --model_args
    config = Path(pretrained) / "config.json" if pretrained else None
    if config is None or not config.is_file():
        return
    try:
        hf = json.loads(config.read_text())
    except (OSError, ValueError):
        return  # the model's own loader names what is wrong with the file
    method = not_representable_method(hf) if isinstance(hf, dict) else None
    if method is not None:
        raise ValueError(
            f"--model_args pretrained={pretrained}: its RoPE ({method}) is not representable in transformers "
            f"({config} rope_type), so --model {model} cannot load it; evaluate it with --model longshort"
        )


def _check_integrity_runnable(out: List[str]) -> None:
    """lm-eval's ``--check_integrity`` runs pytest on its own repository's ``tests/test_version_stable.py``, selected
    by the task names, once the model has loaded: from an installed lm-eval (no ``tests/`` beside it) or without
    pytest it ended in a traceback there, and the pack's tasks have no test in that file (pytest selects none: lm-eval
    raises "Not all tests ... ran successfully"). Such a run is refused before it starts, naming why."""
    if not flag_given(out, "--check_integrity"):
        return
    # deferred: lm_eval (the callers have imported it already)
    import importlib.util

    from lm_eval import evaluator_utils

    from torchtune_longshort.eval.task_index import task_names

    why = ""
    pack = [n for n in task_names(out) if n.startswith("longshort_")]
    if pack:
        why = f"the pack's tasks ({', '.join(pack)}) have no test there"
    else:
        try:
            root = evaluator_utils.find_test_root(start_path=Path(evaluator_utils.__file__))
        except FileNotFoundError:
            root = None
        if root is None:
            why = f"this lm-eval ({Path(evaluator_utils.__file__).parent}) is installed without its repository's tests"
        elif importlib.util.find_spec("pytest") is None:
            why = "pytest is not installed"
    if why:
        raise ValueError("--check_integrity runs lm-eval's own repository tests (tests/test_version_stable.py, with "
                         f"pytest) for the tasks, and {why}: leave --check_integrity out")


def _check_output_path(value: Optional[str]) -> None:
    """lm-eval writes ``<output_path>/<model>/results_<date>.json`` (or, for a path ending ``.json``,
    ``<stem>_<date>.json`` beside it), and only warns when it cannot, after the whole evaluation: a file where the
    folder goes, or a folder that cannot be created, is refused before anything runs."""
    if value is None:
        return
    p = Path(value).expanduser()
    folder = p.parent if p.suffix == ".json" else p
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"--output_path {value!r}: {str(folder)!r} is a file, not a folder (lm-eval writes "
                                 "<output_path>/<model>/results_<date>.json); name a folder")
    check_creatable("--output_path", str(folder), writable=True)  # an existing one that takes no new file too


def run_cli(args: Sequence[str]) -> Dict[str, Any]:
    """Run ``lm-eval <args>`` in-process; when ``--output_path`` is given, return its newest results file parsed
    (``results_*.json``, or ``<name>_*.json`` for ``--output_path <name>.json``; else ``{}``)."""
    quiet_upstream()
    # deferred: lm_eval (the eval model and lm-eval's CLI; torchao logs a line on import, filtered by the
    # quiet_upstream() installed first)
    import torchtune_longshort.eval.model.adapter  # noqa: F401  (registers ``longshort``)
    from lm_eval.__main__ import cli_evaluate
    from torchtune_longshort.eval.task_index import pack_only_index

    setup_cli_logging()  # as lm-eval's CLI (and longshort-eval) first: the pack's lines print as lm-eval's own
    argv: List[str] = ["lm-eval", *lm_eval_argv(args)]
    saved, written = sys.argv, SavedResults()
    with checkpoint_code(trusts_remote_code(argv[1:])):  # the checks' reads and lm-eval's (eval.trust_args)
        check_arguments(argv[1:])
        sys.argv = argv
        try:
            index = pack_only_index(argv, option(argv, "--include_path") or "")
            with index, written.watching(), contained() as faults, hf_auto_schedule_floored():
                cli_evaluate()
        finally:
            sys.argv = saved
    written.raise_if_failed()
    if faults.closing_line():  # longshort-eval's last line, logged: the caller gets the results, NaN among them
        logger.error("%s", faults.closing_line(exit_status=False))
    given = option(argv, "--output_path")  # `--output_path=DIR` too (it returned {}, as if none were given)
    if given is None:
        return {}
    return json.loads(results_files(Path(given))[-1].read_text())  # either --output_path form, as the report reads
