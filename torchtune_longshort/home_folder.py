"""The user's home folder where there may be none: ``HOME`` unset and a user id without an entry in the password
database (a container started with ``--user <uid>``), where :meth:`pathlib.Path.home` raises ``RuntimeError``
("Could not determine home directory.") and the command that asked ended in that traceback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def home_folder() -> Optional[Path]:
    """:meth:`pathlib.Path.home`, or None where it cannot be determined (see the module's docstring)."""
    try:
        return Path.home()
    except RuntimeError:
        return None


def no_home_words() -> str:
    """Why there is no home folder, in the words a refusal uses."""
    return f"HOME is not set and user id {os.getuid()} has no home folder in the password database"
