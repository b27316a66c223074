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

PACKAGE = "torchtune_longshort"
# `-m mod`, `-mmod`, or flags without arguments before it (`-Bm mod`), as Python's own option parser reads them
_DASH_M = re.compile(r"-[bBdEhiIOPqsSuvx]*m(.*)")


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


def command_name(script: str, module: str) -> str:
    """The name a command's lines go by once it runs: ``python -m <module>`` as typed (``sys.orig_argv``) when this
    process runs ``module`` or a module inside it as ``__main__``, else ``script``, its console script's name; as
    argparse takes ``prog`` from ``sys.argv[0]`` (an import by other code, a test's call: ``script``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = re.sub(r"\.__main__$", "", getattr(spec, "name", None) or "")
    return _python_m() if name == module or name.startswith(module + ".") else script
