"""Every command's ``--help`` names each option's default (what test_synthetic_help_defaults checked of the
synthetic command, for every command): ``python -m torchtune_longshort.eval.tasks.babilong.generator --help`` said
only 'comma list of qa1..qa5', 'rows per length, task and depth' and nothing at all for --seed, so a user could not
tell what a run without them writes (the gguf converter's --dtype, longshort-misalignment's --device and --data,
table1's --repo-root alike). The reference is argparse's own: the value each option holds when only the required
arguments are given, which the help (``%(default)s`` expanded) must name after 'default'. An option left out that
means nothing (None, '') must say 'default' unless it is listed below with why."""
import argparse
import importlib
import re

import pytest

COMMANDS = {  # module whose main(argv) builds the parser: the required arguments
    "torchtune_longshort.eval.tasks.babilong.generator": ["--out", "o"],
    "torchtune_longshort.metrics.cli": ["--checkpoint-dir", "c", "--length", "8"],
    "torchtune_longshort.eval.report.build": ["r", "--out", "o"],
    "torchtune_longshort.models.gguf": ["--model", "smollm2-135m-instruct"],
    "torchtune_longshort.study.__main__": ["--config", "c"],
    "torchtune_longshort.study.table1.__main__": ["--config", "c"],
    "torchtune_longshort.study.figures": ["--config", "c", "--report", "r"],
    "torchtune_longshort.synthetic.__main__": [],
    "torchtune_longshort.training.recipe_config.validate": ["c"],
    "torchtune_longshort.configs_cli": [],
}
NOTHING_WHEN_LEFT_OUT = {  # options whose absence is plain: nothing given, nothing done
    "--wheel",  # gguf --model: the wheel is fetched (its help: 'already on disk')
    "--command",  # study: its help says 'as --only would', whose default is the whole grid
    "--note",  # no paragraph
    "--figure", "--lrs",  # synthetic: their helps say what happens without them
}
WORDS = {".": "the working directory"}


class _Parsed(Exception):
    pass


def _parser(module: str, monkeypatch) -> argparse.ArgumentParser:
    def stop(self, *args, **kwargs):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", stop)
    with pytest.raises(_Parsed) as got:
        importlib.import_module(module).main(["--help"])
    monkeypatch.undo()
    return got.value.args[0]


def _shown(value) -> str:
    if isinstance(value, bool):  # a --flag / --no-flag pair
        return "on" if value else "off"
    if isinstance(value, str) and value in WORDS:
        return WORDS[value]
    if isinstance(value, float):
        return f"{value:g}"
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)  # nargs: as typed


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_every_option_names_its_default_in_its_help(module, monkeypatch):
    p = _parser(module, monkeypatch)
    given = vars(p.parse_known_args(COMMANDS[module])[0])
    in_required_group = {a for g in p._mutually_exclusive_groups if g.required for a in g._group_actions}
    missing = []
    for action in p._actions:
        if (not action.option_strings or action.required or action in in_required_group
                or isinstance(action, (argparse._HelpAction, argparse._StoreConstAction, argparse._VersionAction))):
            continue  # store_true / store_false are store_const
        text = " ".join(p._get_formatter()._expand_help(action).split()) if action.help else ""
        value = given[action.dest]
        if value is None or value == "":
            if "default" not in text and action.option_strings[0] not in NOTHING_WHEN_LEFT_OUT:
                missing.append(f"{action.option_strings[0]} (left out: {value!r}): {text!r}")
        elif not re.search(r"default:? " + re.escape(_shown(value)), text):
            missing.append(f"{action.option_strings[0]} (default {value!r}): {text!r}")
    assert not missing, missing
