"""Whether an lm-eval command line trusts the code a checkpoint names (:mod:`torchtune_longshort.rope.
checkpoint_code`): ``trust_remote_code=True`` in ``--model_args``, or lm-eval's ``--trust_remote_code``, which adds it
to the model's arguments. ``longshort-eval`` reads every checkpoint of the command under that answer, its own checks
before lm-eval starts and lm-eval's run alike (the ``longshort`` model, the pack's tasks reading the model's tokenizer
folder, ``--model hf``'s ``peft=`` check): a check that imported a folder's code ungated let the model's own gate
find it imported already."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Sequence

from torchtune_longshort.eval.cli_argv import flag_given


def trusts_remote_code(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (lm-eval's ``run`` arguments, options under their long names: :func:`~torchtune_longshort.
    eval.cli_argv.canonical_options`) trusts a checkpoint's code; a ``--model_args`` lm-eval cannot parse trusts
    nothing (the checks refuse it in their own words)."""
    if flag_given(argv, "--trust_remote_code"):  # as check_arguments reads it for the longshort model
        return True
    # deferred: lm_eval (its parser of --model_args: key=value lists and JSON alike)
    from lm_eval._cli.utils import MergeDictAction

    from torchtune_longshort.eval.model.args import parse_bool  # deferred: torch (the model's arguments)

    parser = ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--model_args", "-a", nargs="+", action=MergeDictAction, default=None)
    try:
        given = parser.parse_known_args(list(argv))[0].model_args or {}
        return parse_bool("trust_remote_code", given.get("trust_remote_code", False))
    except (ValueError, SystemExit, AttributeError, TypeError):
        return False
