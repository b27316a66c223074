"""The command this process is still starting as, read while Python imports it: ``python -m <module>`` while
Python imports the packages above that module (``sys.argv[0]`` is ``"-m"`` until the module itself runs), or one of
this project's console scripts (``longshort-misalignment``, ...) while its script imports the function it calls.
:func:`torchtune_longshort.refusals.stopped_while_importing` asks it, so that Ctrl-C during those imports (torch:
seconds) ends the command in one line naming the command as the user typed it. An import by other code (a user's
script, ``tune run``, a function importing late once the command runs) is no start: None."""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from typing import Optional

from torchtune_longshort.launcher import torchrun_worker

PACKAGE = "torchtune_longshort"
EVAL_MAIN = f"{PACKAGE}.eval.__main__"  # longshort-eval's function's module, which lines advising it name
# `-m mod`, `-mmod`, or flags without arguments before it (`-Bm mod`, `-Rm mod`), as Python's own option parser
# reads them (its short options: "bBc:dEhiIm:OPqRsStuvVW:xX:?"; -h, -V and -? exit before any module runs)
_DASH_M = re.compile(r"-[bBdEiIOPqRsStuvx]*m(.*)")


def starting_command() -> Optional[str]:
    """``"python -m <module>"`` or a console script's name while this process starts as that command, else None."""
    if sys.argv[:1] == ["-m"]:
        return _python_m()
    # pip's script for an entry point: `from <module> import <attr>`, then it calls <attr> (sys.argv[0]: its path)
    name = re.sub(r"(-script\.pyw|\.exe)?$", "", os.path.basename(sys.argv[0])) if sys.argv[:1] else ""
    main = sys.modules.get("__main__")
    for ep in metadata.entry_points(group="console_scripts", name=name) if name else ():
        if ep.module.split(".")[0] == PACKAGE and main is not None and ep.attr.split(".")[0] not in vars(main):
            return name
    return None


def _python_m() -> str:
    """``python -m <module>`` as ``sys.orig_argv`` gave it (the package's name where it cannot be read)."""
    args = getattr(sys, "orig_argv", [])[1:]
    for i, arg in enumerate(args):
        m = _DASH_M.fullmatch(arg)
        if m:
            module = m.group(1) or (args[i + 1] if i + 1 < len(args) else "")
            return f"python -m {module or PACKAGE}"
    return f"python -m {PACKAGE}"


def running_module() -> Optional[str]:
    """``"python -m <module>"`` as typed when this process runs a module as ``__main__`` (started with ``-m``: its
    ``__spec__`` is set), else None (``python path/to/file.py``, an embedding interpreter)."""
    return _python_m() if getattr(sys.modules.get("__main__"), "__spec__", None) is not None else None


def script_of(module: str) -> Optional[str]:
    """The console script whose function ``module`` holds, read from the installed distribution's entry points (one
    home for the pairing: pyproject's ``[project.scripts]``, as pip installed it, from a wheel or editable), or None
    where none names it (the package run from a checkout it was never installed from)."""
    names = sorted(ep.name for ep in metadata.entry_points(group="console_scripts") if ep.module == module)
    return names[0] if names else None


def _running() -> str:
    """The module this process runs as ``__main__`` (started with ``-m``: its ``__spec__``'s name), else ""."""
    return getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None) or ""


def _as_module(module: str) -> str:
    """``python -m`` and the module that holds ``module``'s console-script function (its package for a ``__main__``)."""
    return f"python -m {re.sub(r'[.]__main__$', '', module)}"


def command_name(module: str) -> str:
    """The name a command's lines go by once it runs, ``module`` being the module that holds its console-script
    function (as the entry point names it): ``python -m <module>`` as typed (``sys.orig_argv``) when this process
    runs ``module``, or the package whose ``__main__`` calls it, as ``__main__``; else its console script's name
    (:func:`script_of`), as argparse takes ``prog`` from ``sys.argv[0]`` (an import by other code, a test's call).
    Not installed, and not run as ``-m``: ``python -m`` and the package holding ``module``."""
    running = _running()
    package = re.sub(r"\.__main__$", "", running)
    if running and (running == module or (running != package and module.startswith(package + "."))):
        return _python_m()
    return script_of(module) or _as_module(module)


def advised_command(module: str) -> str:
    """How a line advises running another of this project's commands, ``module`` holding that command's console-script
    function (as for :func:`command_name`): the way this process was started, so that a user who typed ``python -m``
    (whose PATH may hold no console script) is told ``python -m <its module>``, and a console script's user (or a
    caller that is neither: ``tune run``, a test) that command's script (:func:`command_name`, which also answers
    when the advised command is this one). A torchrun worker runs its module with ``-m`` because the launcher
    (``tune run --nproc_per_node N``, ``torchrun``) was told so, not the user: its script, as ``tune run``'s one
    process says (the 2-process run's adapter line advised ``python -m torchtune_longshort.eval peft-base``)."""
    named = command_name(module)
    if _running().split(".")[0] == PACKAGE and not named.startswith("python -m ") and not torchrun_worker():
        return _as_module(module)
    return named
