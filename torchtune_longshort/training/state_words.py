"""The words of a recipe state that does not load (:func:`~.checkpointing.read_recipe_state`): what shows it cut
short, filled with zeros, or not this user's to read."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from torchtune_longshort.refusals import capped


def unreadable_state(path: Path, error: OSError) -> ValueError:
    """The refusal of a recipe state this user may not read (the file's or its folder's mode): it was the system's
    '[Errno 13] Permission denied: <file>' alone, without what to do."""
    return ValueError(f"{path} cannot be read by this user ({error.strerror or error}): give it read access (chmod "
                      f"u+r {path}) and its folder access (chmod u+rx {path.parent}), or run as the user that wrote "
                      "it")


def cut_short(path: Path, error: BaseException) -> str:
    """What shows ``path`` (which ``torch.load`` failed on with ``error``) cut short, '' when nothing does: empty; a
    zip archive (the format torch.save writes) without the end record a zip's last bytes hold; an old-format (pickle)
    file whose data ends early."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return ""
    if not head:
        return "an empty file"
    if b"PK\x03\x04".startswith(head) and not zipfile.is_zipfile(path):
        return f"{type(error).__name__}: {said(error)}; its zip archive lacks the end record"
    if isinstance(error, EOFError) or "pickle data was truncated" in str(error):
        return f"{type(error).__name__}: {said(error)}"
    return ""


def said(error: BaseException) -> str:
    """The first sentence of ``error``'s message on one line (torch's go on with advice to file a bug; its C++
    checks' start with where: '[enforce fail at inline_container.cc:180] . file in archive is not in ...'), whole
    (its mmap refusal names the file: cut at 200 characters, a long folder lost the rest) up to the cap a library's
    words share (:func:`~torchtune_longshort.refusals.capped`)."""
    text = re.sub(r"^\[enforce fail at [^\]]*\]\s*\.?\s*", "", str(error))
    return capped(" ".join(text.split(". ")[0].split())) or type(error).__name__


def zero_filled(path: Path) -> str:
    """What shows ``path`` never written, '' when nothing does: every byte zero (a file whose length reached the disk
    and its data not, after a crash or a power loss; torch read it as 'KeyError: filename 'storages' not found', or,
    memory-mapped, as one of torch's old format)."""
    size = 0
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                if block.count(0) != len(block):
                    return ""
                size += len(block)
    except OSError:
        return ""
    return (f"all its {size} bytes are zeros: its data never reached the disk, a crash or a power loss while it was "
            "written?") if size else ""
