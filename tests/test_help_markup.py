"""--help of the commands whose description is their module's docstring printed the docstring's reST as written:
``longshort-validate CONFIG [key=value ...]``, (:mod:`torchtune_longshort.study.preflight`: ...). It now reads as the
other help texts (and lm-eval's, tune's) write a command or a name: in single backticks."""

from __future__ import annotations

import importlib
import re

import pytest

COMMANDS = ["torchtune_longshort.training.recipe_config.validate", "torchtune_longshort.study.__main__",
            "torchtune_longshort.study.table1.__main__", "torchtune_longshort.synthetic.__main__"]


@pytest.mark.parametrize("module", COMMANDS)
def test_help_prints_no_rest_markup(module, capsys):
    mod = importlib.import_module(module)
    with pytest.raises(SystemExit) as exit_info:
        mod.main(["--help"])
    printed = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "``" not in printed and not re.search(r":(mod|func|class|meth):`", printed), printed
    # the reference: the docstring's own literals, each as `literal` in the description the help prints (after the
    # usage, before the arguments)
    description = re.split(r"\n(?:positional arguments|options):", printed.split("\n\n", 1)[1])[0]
    out = " ".join(description.split())
    literals = [" ".join(x.split()) for x in re.findall(r"``(.+?)``", mod.__doc__, flags=re.S)]
    shown = [x for x in literals if x in out]
    shown = [x for x in shown if not any(x != y and x in y for y in shown)]  # CONFIG: inside another one
    assert shown and all(f"`{x}`" in out for x in shown), (shown, out)
    for target in re.findall(r":mod:`([^`~]+)`", mod.__doc__):
        assert target not in out or f"`{target}`" in out, target
