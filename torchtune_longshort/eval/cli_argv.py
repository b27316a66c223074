"""lm-eval's command line as lm-eval's own parser reads it: an option's value (:func:`option`), every spelling of a
``run`` option under its long name (:func:`canonical_options`), a ``~`` in a path option's value expanded as a shell
would (:func:`home_expanded`). Read by ``longshort-eval`` before lm-eval starts, so that its checks see what lm-eval
will run; ``--batch_size`` as ``hf`` reads it is checked here (:func:`check_batch_size`), and its ``auto:N`` over a
list of fewer than N requests kept from dividing by zero (:func:`hf_auto_schedule_floored`)."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
from argparse import _SubParsersAction
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from torchtune_longshort.eval.model_args_argv import model_args_values_mapped
from torchtune_longshort.plural import counted
from torchtune_longshort.started_as import EVAL_MAIN, command_name

logger = logging.getLogger(__name__)


def prog() -> str:
    """``longshort-eval``'s name in its lines: as it was started (:func:`~torchtune_longshort.started_as.command_name`:
    ``python -m torchtune_longshort.eval`` as typed, else the console script's name)."""
    return command_name(EVAL_MAIN)


def stock_lm_eval() -> str:
    """Stock lm-eval 0.4.13 running the pack, in its `run` form as `lm-eval --help` gives it (longshort-eval's --help
    and `tasks-path --help` print it), its ``tasks-path`` asked of the command as it was started (:func:`prog`: under
    ``python -m torchtune_longshort.eval`` a ``longshort-eval`` may not be on the PATH)."""
    return (f'lm-eval run --model hf --model_args pretrained=DIR --include_path "$({prog()} tasks-path)" '
            "--tasks longshort_ppl ...")


def asks_help(args: Sequence[str]) -> bool:
    """Whether lm-eval 0.4.13's CLI answers ``args`` with a help text (exit 0), evaluating nothing: none given,
    ``-h`` / ``--help`` anywhere, or ``run`` alone (``lm-eval run`` prints run's help: HarnessCLI.parse_args)."""
    args = list(args)
    return not args or args == ["run"] or "-h" in args or "--help" in args


def option(args: Sequence[str], name: str) -> Optional[str]:
    """The value of ``--<name> V`` / ``--<name>=V`` in ``args`` (the last one), else None."""
    values = option_values(args, name)
    return values[-1] if values else None


def option_values(args: Sequence[str], name: str) -> List[str]:
    """Each value of ``--<name> V`` / ``--<name>=V`` in ``args``, in order (lm-eval's ``key=value`` options merge
    every occurrence: its ``MergeDictAction``)."""
    values = []
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            values.append(args[i + 1])
        elif a.startswith(name + "="):
            values.append(a.split("=", 1)[1])
    return values


def flag_given(out: Sequence[str], name: str) -> bool:
    """Whether the option ``name`` (an optional-value flag: ``--apply_chat_template [name]``) is on: given, and not
    as ``False``."""
    return any((a == name and (i + 1 >= len(out) or out[i + 1].lower() != "false"))
               or (a.startswith(name + "=") and a.split("=", 1)[1].lower() != "false") for i, a in enumerate(out))


def _run_actions(command: str = "run") -> list:
    """The options lm-eval's ``run`` command (or ``ls``, ``validate``) declares, as its own parser's actions."""
    # deferred: lm_eval (its CLI's parser; tasks-path answers without it)
    from lm_eval._cli.harness import HarnessCLI

    parser = HarnessCLI()._parser
    return next(a for a in parser._actions if isinstance(a, _SubParsersAction)).choices[command]._actions


def _run_options(command: str = "run") -> Dict[str, Tuple[str, bool]]:
    """Every spelling of an option lm-eval's ``run`` command (or ``ls``, ``validate``) declares (``-M``,
    ``--model``) -> (its long name, whether it takes a value), read from lm-eval's own parser."""
    return {name: (action.option_strings[0], action.nargs != 0) for action in _run_actions(command)
            for name in action.option_strings}


# what a value of lm-eval's typed `run` options must be, said where lm-eval's parser named its type function:
# `argument --seed: invalid functools.partial(<function _int_or_none_list_arg_type at 0x...>, 3, 4,
# '0,1234,1234,1234') value: 'x'`, `argument --samples/-E: invalid try_parse_json value: '{x'`
TAKES = {
    "--seed": "give one integer for all four seeds (python, numpy, torch, fewshot), or 3 or 4 of them comma-separated, "
              "None leaving one unset (e.g. --seed 42, --seed 0,None,8,52)",
    "--limit": "give a whole number of documents per task (e.g. 10), or a fraction of them between 0 and 1 (e.g. 0.1)",
    "--num_fewshot": "give a whole number of few-shot examples, 0 or more (e.g. 5)",
    "--max_batch_size": "give a whole number, 1 or more, the largest batch --batch_size auto tries (e.g. 64)",
    "--samples": "give a JSON object of task names to document indices, e.g. --samples '{\"longshort_ppl\": [0, 1]}' "
                 "(double quotes inside, single outside)",
    "--fewshot_as_multiturn": "give true or false (lm-eval reads any word but true, 1 or yes as false)",
    "--batch_size": "give a whole number (e.g. 8), auto, or auto:N (N a finite positive number: auto-tune N "
                    "times), as lm-eval takes them",
}
_BOOLEAN_WORDS = ("true", "1", "yes", "false", "0", "no")
# an example of each key=value option's JSON spelling (lm-eval's "Invalid JSON: {x. Hint: ..." named no option); a
# path with a comma needs it in --model_args
JSON_EXAMPLES = {"--metadata": '{"max_seq_lengths": "1k,4k"}', "--model_args": '{"pretrained": "/runs 1,2/step_2"}',
                 "--gen_kwargs": '{"max_gen_toks": 64}'}


def check_option_values(args: Sequence[str]) -> None:
    """Each value of an lm-eval ``run`` option in ``args`` (long names: :func:`canonical_options`) that lm-eval's
    parser types read by that parser's own type function, before anything runs; ``ValueError`` in one line naming
    the option and what it takes (:data:`TAKES`); a ``key=value`` option's JSON that does not parse names the
    option (:data:`JSON_EXAMPLES`). ``--fewshot_as_multiturn maybe``, which lm-eval read as false, is
    refused too, and so are a ``--limit`` lm-eval would misread (:func:`check_limit`), a negative ``--num_fewshot``
    (:func:`check_num_fewshot`) and a ``--max_batch_size`` below 1 (:func:`check_max_batch_size`)."""
    from argparse import ArgumentTypeError

    from lm_eval._cli.utils import MergeDictAction  # deferred: lm_eval (as _run_actions)

    for action in _run_actions():
        name = action.option_strings[0] if action.option_strings else ""
        for given in option_values(args, name) if isinstance(action, MergeDictAction) else ():
            _check_json(name, given)  # every occurrence: lm-eval merges them, and refused an earlier one's bad JSON
        value = option(args, name) if callable(action.type) and action.type is not str else None
        if value is None or (action.nargs == "?" and value.startswith("-")):  # `--fewshot_as_multiturn --x`: bare
            continue
        takes = TAKES.get(name, "")
        if name == "--fewshot_as_multiturn" and value.strip().lower() not in _BOOLEAN_WORDS:
            raise ValueError(f"{name} {value}: {takes}")
        logging.disable(logging.WARNING)  # --seed 1,2,3 logs its "filled with defaults" once, when lm-eval reads it
        try:
            action.type(value)
        except ArgumentTypeError as e:
            raise ValueError(f"{name} {value}: {e}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name} {value}: {takes or e}") from None
        finally:
            logging.disable(logging.NOTSET)
    check_limit(option(args, "--limit"))
    check_num_fewshot(option(args, "--num_fewshot"))
    check_max_batch_size(option(args, "--max_batch_size"), f"--max_batch_size {option(args, '--max_batch_size')}")
    check_batch_size(option(args, "--batch_size"), f"--batch_size {option(args, '--batch_size')}")


def check_batch_size(value: Optional[str], given_as: str) -> None:
    """lm-eval's parser takes any ``--batch_size`` string; its ``hf`` model reads ``auto`` / ``auto:N`` (``N`` by
    ``float``), else ``int``, once the model has loaded ("invalid literal for int() with base 10: 'x'"), and our
    model named ``batch_size=`` of its arguments: refused before, in one line starting with ``given_as`` (the flag
    and its value, or ``--model_args batch_size=...``, which goes on as the flag). ``auto:inf`` too: ``hf``
    re-detects every ``int(len(requests) / N)`` requests, 0 there (ZeroDivisionError once the model had loaded)."""
    if value is None:
        return
    every = value[len("auto:"):] if value.startswith("auto:") else None
    try:
        ok = value == "auto" or (0 < float(every) < math.inf if every is not None else int(value) >= 1)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{given_as}: {TAKES['--batch_size']}")


@contextlib.contextmanager
def hf_auto_schedule_floored() -> Iterator[None]:
    """While open, lm-eval's ``hf`` model (``HFLM`` and its subclasses) given ``--batch_size auto:N`` and a request
    list shorter than N detects its batch size again at each request, as the ``longshort`` model's ``auto:N`` does
    there (:class:`~torchtune_longshort.eval.model.batch_size.BatchPlan`), and says so in one line, once a run:
    its ``_batch_scheduler`` re-detects every ``int(len(requests) / N)`` requests, 0 there (``--limit 1 --batch_size
    auto:2.5``: ZeroDivisionError once the model had loaded, no results). lm-eval's files are left as they are: its
    method is wrapped for each ``evaluate`` call (the model is built then) and restored after."""
    from lm_eval import evaluator  # deferred: lm_eval (longshort-eval's run imports it already)

    evaluate, noted = evaluator.evaluate, []

    def floored(scheduler):
        def schedule(self, pos, requests):
            n, every = len(requests), self.batch_schedule
            if n == 0 or int(n / every) > 0:
                return scheduler(self, pos, requests)
            if not noted:  # once a run: each task's list may be as short
                noted.append(n)
                logger.warning("--batch_size auto:%s: %s in a list, fewer than %s: hf detects its batch size at each "
                               "request (lm-eval's own schedule divides by int(%d / %s) = 0)", f"{every:g}",
                               counted(n, "request"), f"{every:g}", n, f"{every:g}")
            self.batch_schedule = n  # int(n / n) = 1: a new span at each request
            try:
                return scheduler(self, pos, requests)
            finally:
                self.batch_schedule = every
        return schedule

    def evaluate_floored(*args, **kwargs):
        hf = sys.modules.get("lm_eval.models.huggingface")  # loaded where the model is hf's (or a subclass)
        if hf is None:
            return evaluate(*args, **kwargs)
        scheduler = hf.HFLM._batch_scheduler
        hf.HFLM._batch_scheduler = floored(scheduler)
        try:
            return evaluate(*args, **kwargs)
        finally:
            hf.HFLM._batch_scheduler = scheduler

    evaluator.evaluate = evaluate_floored
    try:
        yield
    finally:
        evaluator.evaluate = evaluate


def _check_json(name: str, value: Optional[str]) -> None:
    """A ``key=value`` option's value meant as JSON (it holds ``{``, as lm-eval reads it) parses."""
    if value is None or "{" not in value:
        return
    try:
        json.loads(value)
    except ValueError as e:
        example = JSON_EXAMPLES.get(name, '{"key": "value"}')
        raise ValueError(f"{name} {value!r} is not JSON ({e}); e.g. {name} '{example}' (double quotes inside, single "
                         "outside)") from None


def check_limit(value: Optional[str]) -> None:
    """lm-eval takes ``--limit`` < 1 as a fraction of each task's documents (``ceil``) and one >= 1 as a count
    (``int``): 0 and a negative one failed after the model had loaded ("task.build_requests() did not find any
    docs!", an islice error naming no option), and 1.5 ran 1 document without a word."""
    if value is None:
        return
    try:
        limit = float(value)
    except ValueError:
        return  # check_option_values says what it takes
    if not math.isfinite(limit) or limit <= 0 or (limit >= 1 and not limit.is_integer()):
        raise ValueError(f"--limit {value} is not accepted: {TAKES['--limit']}")


def check_num_fewshot(value: Optional[str]) -> None:
    """lm-eval's parser takes any ``int`` for ``--num_fewshot``: a negative one ran as 0-shot without a word (its
    ``fewshot_context`` adds examples only when the number is > 0) while the results recorded it as given."""
    _check_at_least(value, 0, f"--num_fewshot {value}", "--num_fewshot")


def check_max_batch_size(value: Optional[str], given_as: str) -> None:
    """lm-eval's parser takes any ``int`` for ``--max_batch_size``; its ``hf`` starts ``--batch_size auto`` there
    (accelerate's ``find_executable_batch_size``): 0 ran at batch size 1 without a word, -1 failed once the model had
    loaded ("Trying to create tensor with negative dimension -1"), and the longshort model refused both naming
    ``max_batch_size=`` of its arguments. Refused in one line starting with ``given_as`` (as
    :func:`check_batch_size`)."""
    _check_at_least(value, 1, given_as, "--max_batch_size")


def _check_at_least(value: Optional[str], least: int, given_as: str, flag: str) -> None:
    """A ``value`` that is no whole number (lm-eval's ``int``), or one below ``least``, refused in one line starting
    with ``given_as``, saying what ``flag`` takes (:data:`TAKES`): ``--model_args max_batch_size=abc``, which goes on
    as the flag, was refused by lm-eval's parser as "argument --max_batch_size: invalid int value: 'abc'"."""
    try:
        ok = value is None or int(value) >= least
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{given_as} is not accepted: {TAKES[flag]}")


def canonical_options(args: Sequence[str]) -> List[str]:
    """``args`` with each option of lm-eval's ``run`` under its long name, as lm-eval's parser reads it: a short
    alias (``-M longshort``, ``-Mlongshort``) and a unique abbreviation (``--output``; lm-eval allows them) become
    ``--model`` / ``--output_path``, so that this wrapper's checks see what lm-eval will run (``-M longshort`` was
    evaluated by the longshort model and refused as ``hf`` by the tasks that need it). Values are left alone. The
    options of ``ls`` and ``validate`` are theirs (``validate --include DIR``: the pack's folder was put in its
    place)."""
    names = _run_options(args[0] if args and args[0] in ("ls", "validate") else "run")
    longs = sorted({long for long, _ in names.values() if long.startswith("--")})
    out: List[str] = []
    for a in map(str, args):
        head, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        abbreviated = [n for n in longs if n.startswith(head)] if a.startswith("--") and head not in names else []
        if head in names:
            out.append(names[head][0] + eq + value)
        elif len(abbreviated) == 1:
            out.append(abbreviated[0] + eq + value)
        elif not a.startswith("--") and a[:2] in names and names[a[:2]][1] and len(a) > 2:
            # -Mlongshort; -o=DIR is DIR, as argparse reads it (it was "=DIR": a folder named "=" was made)
            out += [names[a[:2]][0], a[3:] if a[2] == "=" else a[2:]]
        else:
            out.append(a)
    return out


# lm-eval's options that name a path, which lm-eval reads as given: `--output_path=~/ev` (no shell expands a tilde
# after "=") made a folder named "~" in the working directory, after this wrapper had checked the home folder's
PATH_OPTIONS = ("--output_path", "--include_path", "--config", "--use_cache")
# the --model_args keys that name a path: `--model_args dtype=float32,pretrained=~/run/step_2` (no shell expands a
# tilde after a second "=") reached transformers as the hub name '~/run/step_2' (a traceback, exit 1) and the
# longshort model as a folder that is not there
MODEL_PATH_KEYS = ("pretrained", "checkpoint_dir", "tokenizer", "peft", "delta")


def home_expanded(args: Sequence[str]) -> List[str]:
    """``args`` (long option names) with a leading ``~`` of each :data:`PATH_OPTIONS` value, and of each
    :data:`MODEL_PATH_KEYS` value of ``--model_args`` (read as lm-eval reads them: JSON or ``key=value`` items,
    :func:`~torchtune_longshort.eval.model_args_argv.model_args_values_mapped`), expanded, as a shell expands
    ``--output_path ~/ev``; a local folder's trailing ``/`` is cut from ``pretrained``
    (:func:`_without_trailing_slash`)."""
    out = list(args)
    for i, a in enumerate(out):
        name, eq, value = a.partition("=")
        if name in PATH_OPTIONS and eq:
            out[i] = f"{name}={os.path.expanduser(value)}"
        elif a in PATH_OPTIONS and i + 1 < len(out):
            out[i + 1] = os.path.expanduser(out[i + 1])
    return model_args_values_mapped(out, _model_path)


def _model_path(key: str, value: str) -> str:
    if key not in MODEL_PATH_KEYS:
        return value
    value = os.path.expanduser(value) if value.startswith("~") else value
    return _without_trailing_slash(value) if key == "pretrained" else value


def _without_trailing_slash(path: str) -> str:
    """A local folder's ``path`` without its trailing ``/``: lm-eval names its results folder after ``pretrained=``
    as written (``run/step_2/`` gave ``run__step_2__``, ``run/step_2`` ``run__step_2``: one checkpoint, two folders).
    Anything else (a hub name, a folder not there, ``/``) is left as given."""
    cut = path.rstrip("/" + os.sep)
    return cut if cut and cut != path and os.path.isdir(path) else path


def check_verbosity(value: Optional[str]) -> None:
    """lm-eval 0.4.13 applies ``--verbosity`` (deprecated there) only once every task has run (``simple_evaluate``
    calls ``setup_logging`` after ``evaluate``, the level upper-cased, ``LMEVAL_LOG_LEVEL`` naming a level taking its
    place): a level the logging module lacks (``--verbosity LOUD``) failed there, 'Unknown level', the whole
    evaluation run and no results saved. Refused before the run instead, naming the levels."""
    env = os.environ.get("LMEVAL_LOG_LEVEL", "").upper()
    if value is None or isinstance(logging.getLevelName(env), int):
        return
    try:
        logging.Logger("longshort-eval --verbosity").setLevel(value.upper())
    except (ValueError, TypeError):
        raise ValueError(f"--verbosity {value} is no logging level: give DEBUG, INFO, WARNING, ERROR or CRITICAL "
                         "(lm-eval would find it so only after every task had run, saving no results)") from None


def check_option_pairs(out: Sequence[str]) -> None:
    """lm-eval's own rules between options (``EvaluatorConfig._validate_arguments``: ``--log_samples`` or
    ``--predict_only`` need ``--output_path``; ``--fewshot_as_multiturn`` true needs ``--apply_chat_template``), on
    the command line and its ``--config`` YAML as lm-eval merges them, applied before the model loads: lm-eval
    applied them only after its start-up (10-20 s) and another line. ``ValueError`` in lm-eval's words."""
    # deferred: lm_eval (its evaluation config; the callers have imported it already)
    from lm_eval.config.evaluate_config import EvaluatorConfig

    config = option(out, "--config")
    given = EvaluatorConfig.load_yaml_config(config) if config else {}
    keys = ("log_samples", "predict_only", "output_path", "apply_chat_template", "fewshot_as_multiturn")
    merged = {key: given.get(key) for key in keys}
    for key in ("log_samples", "predict_only"):
        merged[key] = bool(merged[key]) or f"--{key}" in out  # store_true flags (out: long names)
    merged["output_path"] = option(out, "--output_path") or merged["output_path"]
    merged["apply_chat_template"] = flag_given(out, "--apply_chat_template") or bool(merged["apply_chat_template"])
    if any(a == "--fewshot_as_multiturn" or a.startswith("--fewshot_as_multiturn=") for a in out):
        value = option(out, "--fewshot_as_multiturn")  # bare (or before another option): lm-eval's const True
        merged["fewshot_as_multiturn"] = value is None or value.startswith("-") or \
            value.lower() in ("true", "1", "yes")
    EvaluatorConfig(tasks="-", **merged)._validate_arguments()
