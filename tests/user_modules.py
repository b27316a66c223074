"""A module of one's own, as a user's folder holds it, for the dotted-path registries' tests (a RoPE method, a model
family, a divergence): written under a folder put first on ``sys.path``, and forgotten as a new process sees it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict


def write_user_module(root: Path, files: Dict[str, str], monkeypatch) -> Path:
    """``files`` (path under ``root`` -> text) written, ``root`` first on ``sys.path`` for the test; returns
    ``root``."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.syspath_prepend(str(root))
    return root


def forget_user_module(top: str) -> None:
    """As a new process sees it: no path under the top-level module ``top`` in any dotted-path registry, and none of
    its modules imported."""
    from torchtune_longshort.loss import divergences
    from torchtune_longshort.models.families import MODEL_FAMILIES
    from torchtune_longshort.rope import ROPE_METHODS

    # (a commit before the divergences' registry has no PER_POSITION: each test then fails on its own assertion)
    for registry in (ROPE_METHODS, MODEL_FAMILIES, getattr(divergences, "PER_POSITION", {})):
        for key in [k for k in registry if k.startswith(top + ".")]:
            dict.pop(registry, key)
    for name in [m for m in sys.modules if m.split(".")[0] == top]:
        del sys.modules[name]
