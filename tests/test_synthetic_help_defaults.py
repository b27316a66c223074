"""``python -m torchtune_longshort.synthetic --help`` names every flag's default: --task, --bits, --pe, --outrep,
--model, --optimizer and --seed said only 'one of ...' / 'seed of a single run', so a user running
``--pe rope`` could not tell the task it trains (length) from the help. The reference is argparse's own: the value
each option takes when it is not given (``parse_args([])``), which the help must name after 'default'."""
import argparse
import re

from torchtune_longshort.synthetic.__main__ import _parser


def test_every_option_with_a_default_names_it_in_its_help():
    p = _parser()
    given_nothing = vars(p.parse_args([]))
    missing = []
    for action in p._actions:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)):
            continue
        value = given_nothing[action.dest]
        if value is None:  # a default that depends on --quick / --figure: its help says both
            assert action.dest in ("figure", "cache", "lrs") or "default" in action.help, action.option_strings
            continue
        text = " ".join((action.help or "").split())
        if not re.search(r"default:? " + re.escape(f"{value:g}" if isinstance(value, float) else str(value)), text):
            missing.append(f"{action.option_strings[0]} (default {value!r}): {text!r}")
    assert not missing, missing

