"""The one line for a tokenizer name that is no local file or folder and that transformers could not load from the
hub: offline, that the Hugging Face cache holds none of it and which setting keeps the hub offline; online,
transformers' first sentence, whole (a cut at 200 characters ended "... offline mode at 'https://")."""

from __future__ import annotations

import os
from pathlib import Path

# huggingface_hub's offline switches, in the order its is_offline_mode reads them
HUB_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def hub_offline_variable() -> str:
    """``NAME=value`` of the variable that keeps huggingface_hub offline (``offline mode on`` when none is set: a
    caller that set ``constants.HF_HUB_OFFLINE`` itself)."""
    return next((f"{v}={os.environ[v]}" for v in HUB_OFFLINE_VARIABLES if os.environ.get(v)), "offline mode on")


def missing_tokenizer_line(name: str, error: BaseException, label: str = "tokenizer") -> str:
    """Why tokenizer ``name`` (given as ``label``: ``--tokenizer`` on a command line) loads neither from here nor
    from the hub (``error``: transformers' ``OSError``), and the fix, in one line."""
    # deferred: torch, huggingface_hub (peft_fit imports the models package, which imports torch; both are asked
    # only once a tokenizer failed to load)
    from huggingface_hub import constants

    from torchtune_longshort.eval.peft_fit import hub_named

    here = f" in {str(Path.cwd())!r}, the folder this command runs in,"
    where = "" if Path(name).expanduser().is_absolute() else here
    if not hub_named(name):  # written as a path (/, ./, ~), or no repository id: the hub is no way to it
        return (f"{label} {name!r}: no tokenizer file or folder{where.rstrip(',') or ' there'}: name a tokenizer "
                "folder or file")
    if constants.is_offline_mode():
        return (f"{label} {name!r}: neither a tokenizer file or folder{where} nor a hub tokenizer in the Hugging Face "
                f"cache ({constants.HF_HUB_CACHE}), and the hub is offline ({hub_offline_variable()}): name a "
                "tokenizer folder or file, or a hub name already in the cache (run once with offline mode off to "
                "download it)")
    said = " ".join(str(error).split()).split(". ", 1)[0].rstrip(".") or type(error).__name__
    return (f"{label} {name!r}: neither a tokenizer file or folder{where} nor a tokenizer the hub gives ({said}): "
            "name a tokenizer folder or file, or a hub name")
