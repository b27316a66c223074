"""Checks of single config values: ``(path, value) -> value``, each raising ``ValueError`` that names the field, the
value and what would be accepted. The sections' :func:`~.fields.setting` declarations use them."""

from __future__ import annotations

import errno
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from torchtune_longshort.devices import ACCEPTED, is_device_name, require_device
from torchtune_longshort.lengths import length_value
from torchtune_longshort.refusals import Refusal

Check = Callable[[str, Any], Any]  # (field path, value) -> the accepted value, or raise naming the path


def refuse(path: str, value: Any, accepted: str) -> ValueError:
    return ValueError(f"{path}={value!r} is not accepted: expected {accepted}")


def integer(minimum: int = 1) -> Check:
    """An int (not a bool) >= ``minimum``."""

    def check(path: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise refuse(path, value, f"an integer >= {minimum}")
        return value

    return check


def number(minimum: float = 0.0, inclusive: bool = True) -> Check:
    """A finite number >= ``minimum`` (> when not ``inclusive``), returned as a float."""

    def check(path: str, value: Any) -> float:
        ok = not isinstance(value, (bool, str)) and isinstance(value, (int, float)) and math.isfinite(value)
        if not ok or value < minimum or (not inclusive and value == minimum):
            raise refuse(path, value, f"a finite number {'>=' if inclusive else '>'} {minimum:g}")
        return float(value)

    return check


def boolean(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise refuse(path, value, "true or false")
    return value


def one_of(choices: Sequence[str]) -> Check:
    def check(path: str, value: Any) -> Any:
        if value not in choices:
            raise refuse(path, value, f"one of {list(choices)}")
        return value

    return check


def text(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise refuse(path, value, "a non-empty string")
    return value


def length(minimum: int = 1) -> Check:
    """A token count >= ``minimum``: an int or a label (``1k`` = 1024, :mod:`torchtune_longshort.lengths`)."""

    def check(path: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise refuse(path, value, f"a token count >= {minimum} (512, 1k, ...)")
        return length_value(path, value, minimum)

    return check


def device_name(path: str, value: Any) -> str:
    """A device name of :data:`~torchtune_longshort.devices.ACCEPTED` (whether this machine has it:
    :func:`check_device`)."""
    if not is_device_name(value):
        raise refuse(path, value, ACCEPTED)
    return str(value)


def check_device(path: str, name: str) -> None:
    """The device must exist on this machine (:func:`torchtune_longshort.devices.require_device`, every entry
    point's rule)."""
    require_device(name, path)


class UnwritablePath(Refusal, PermissionError):
    """A folder the config names that this machine cannot create."""


def check_creatable(path: str, value: str, writable: bool = False) -> None:
    """A folder the run creates at ``value`` (field ``path``) if it is absent: an existing one must be a folder (with
    ``writable``, one that takes new entries), an absent one's nearest existing parent a folder that takes new
    folders. That is tried (:func:`_refuses_new_folder`, which leaves the folder as it was, its mtime too): neither
    a root user's permission bits nor the mount flags of ``/proc`` or ``/sys`` say it."""
    p = Path(value)
    if p.exists():
        if not p.is_dir():
            raise NotADirectoryError(f"{path}={value!r} is a file, not a folder: name a folder")
        why = _refuses_new_folder(p) if writable else None
        if why:
            raise UnwritablePath(f"{path}={value!r} does not take new files ({why}); name a folder you can write")
        return
    link = unreachable_link(p)
    if link:  # mkdir would fail on it ('File exists', or a loop), after the command's work: a traceback
        raise NotADirectoryError(f"{path}={value!r} cannot be created: {link}; name another path, or make the "
                                 "link name a folder")
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    parent = parent.absolute()  # named as a folder, not as '.' (a relative value in the working directory)
    if not parent.is_dir():
        raise NotADirectoryError(f"{path}={value!r} cannot be created: {str(parent)!r} is a file, not a folder; "
                                 "name a path in a folder")
    why = _refuses_new_folder(parent)
    if why:
        raise UnwritablePath(f"{path}={value!r} cannot be created: {str(parent)!r} does not take new folders "
                             f"({why}); name a path in a folder you can write")


def unreachable_link(p: Path) -> Optional[str]:
    """The first of ``p`` and its absent ancestors that is a symbolic link with nothing behind it (its target not
    there, or a loop of links), described; None when there is none. ``Path.exists`` says False of such a link, and a
    folder made there fails ('File exists'), neither creating the target nor replacing the link."""
    for q in (p, *p.parents):
        if q.exists():
            return None
        if q.is_symlink():
            try:
                os.stat(q)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    return f"{str(q)!r} is a symbolic link in a loop ({str(q)!r} -> {os.readlink(q)!r} ...)"
            return f"{str(q)!r} is a symbolic link to {_link_chain(q)}, which does not exist"
    return None


def _link_chain(q: Path) -> str:
    """Where the link ``q`` leads, each link of a chain named up to the path that is not there (``'dl'`` ->
    ``'/gone/x'``): naming the first target alone told of a link (``ls`` shows it) that it does not exist."""
    hops = [os.readlink(q)]
    at = q.parent / hops[-1]
    while at.is_symlink() and len(hops) < 40:  # within the chain's end (a loop is ELOOP, refused before)
        hops.append(os.readlink(at))
        at = at.parent / hops[-1]
    return " -> ".join(repr(h) for h in hops)


def refuses_writes(path: Path) -> Optional[str]:
    """Why the existing folder ``path`` takes no new file, or the existing file ``path`` cannot be written (tried:
    :func:`_refuses_new_folder`; the file opened for writing and closed unchanged; immutable, read-only mount,
    permissions), None when it can."""
    return _refuses_new_folder(path) if path.is_dir() else _refuses_write(path)


def _refuses_write(file: Path) -> Optional[str]:
    try:
        open(file, "r+b").close()
    except OSError as e:
        return e.strerror or str(e)
    return None


# O_TMPFILE's "no such operation" (a file system without it, /proc, a kernel before 3.11 that reads it as O_DIRECTORY)
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOTSUP}


def _refuses_new_folder(folder: Path) -> Optional[str]:
    """Why ``folder`` does not take a new entry, None when it does. Tried with an unnamed file in it (O_TMPFILE: the
    folder's permission, immutable flag and mount are asked as for a new entry, and no entry is made, so the
    folder's mtime stays: a refused run leaves it as it was); where the file system has no O_TMPFILE, with a folder
    made there and removed at once."""
    tmpfile = getattr(os, "O_TMPFILE", None)
    if tmpfile is not None:
        try:
            os.close(os.open(folder, tmpfile | os.O_WRONLY, 0o600))
            return None
        except OSError as e:
            if e.errno not in _NO_TMPFILE:
                return e.strerror or str(e)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".longshort_check_", dir=folder))
    except OSError as e:
        return e.strerror or str(e)
    return None


def wrapped(validate: Callable[[Any], Any], converts: bool = False) -> Check:
    """A library validator (raising ``ValueError``/``TypeError`` with its own wording) with the field's path added;
    the field takes what the validator returns where it ``converts`` (``validate_alpha``: a float), else the value."""

    def check(p: str, value: Any) -> Any:
        try:
            checked = validate(value)
        except (TypeError, ValueError) as e:
            raise ValueError(named_once(p, value, e)) from None
        return checked if converts else value

    return check


def named_once(path: str, value: Any, error: BaseException, context: str = "") -> str:
    """The config check's refusal of ``path=value`` where a library validator raised ``error``: its message with the
    field's path, the value named once where the message names it itself (``min_context=0 is not valid`` ->
    ``loss.min_context=0 is not valid``), else ``path=value is not accepted<context>: <message>`` (``context``:
    what the value was judged against, `` at seq_len=256``)."""
    said, named = str(error), f"{path.rsplit('.', 1)[-1]}={value!r}"
    if said.startswith(named):
        return f"{path}={value!r}{said[len(named):]}"
    return f"{path}={value!r} is not accepted{context}: {said}"


def resolve_component(path: str, dotted: Any) -> Any:
    """The callable a ``_component_`` names, or a ``ValueError`` naming the field when it does not import."""
    from torchtune.config._utils import _get_component_from_path

    if not isinstance(dotted, str) or not dotted:
        raise refuse(path, dotted, "a dotted path such as torch.optim.AdamW")
    try:
        target = _get_component_from_path(dotted)
    except Exception as e:  # torchtune's InstantiationError, ImportError, AttributeError
        raise ValueError(f"{path}={dotted!r} does not import: {e}") from None
    if not callable(target):  # a module (`model=torchtune.models.llama2`): "'module' object is not callable" at build
        node = path[:-len("._component_")] if path.endswith("._component_") else "it"
        raise ValueError(f"{path}={dotted!r} names a {type(target).__name__}, not a class or function: name the one "
                         f"that builds {node}, as {dotted}.<name>")
    return target


def check_seed(seed: Any, name: str) -> None:
    """``seed`` as ``torch.Generator.manual_seed`` takes it (an int in [-2**63, 2**64)), else ``ValueError`` naming
    ``name``: past that range torch said only "Overflow when unpacking long long", after the model had loaded."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"{name}={seed!r} must be an int")
    if not -2**63 <= seed < 2**64:
        raise ValueError(f"{name}={seed} is out of range: give an integer in [-2**63, 2**64) (torch.Generator's "
                         "seeds), e.g. 0")
