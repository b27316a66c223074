"""Where a number came from: the provenance block every results, metrics and report file of the project carries.

:func:`provenance` is the one function that builds it; everything that writes a file calls it::

    {"project": {"name", "version", "git_commit", "git_dirty"},       # the checkout's, or the build's (a wheel)
     "packages": {"torch", "torchtune", "lm_eval", "transformers"},  # installed versions (null: not installed)
     "python": {"version", "implementation", "executable"},
     "stdlib_corpus": {"sha256", "files", "bytes", "root"},         # only when the stdlib corpus was used
     "device": {"type", "name", "count"}}

The commit is the checkout's that holds the package (an editable install), else the one a wheel recorded when it
was built from a git checkout (``setup.py`` writes :data:`BUILD_COMMIT` into it: ``pip install .`` of a clone,
``pip install git+https://...``); null when neither is known (a wheel built from a source archive).

The stdlib corpus (``torchtune_longshort.data.stdlib_corpus``) is the running interpreter's own source files, so
perplexities on it change with the Python version; its content hash says which text a number was measured on.
It is included when asked (``stdlib=True``) or, by default, when this process has listed the corpus
(``stdlib_corpus.was_used``: ``stdlib_source_files`` marks it).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from torchtune_longshort import __version__
from torchtune_longshort.data import stdlib_corpus

PACKAGES = ("torch", "torchtune", "lm_eval", "transformers")
# Distribution names where they differ from the import name.
_DISTRIBUTIONS = {"lm_eval": "lm-eval"}
_PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The commit a wheel was built from (written into the built package by setup.py; absent from a checkout).
BUILD_COMMIT = Path(__file__).resolve().with_name("_build_commit.json")
# A file of this package a checkout of the project tracks (``root``-relative): a repository that holds the package
# without tracking it is another project's
_TRACKED = f"{Path(__file__).resolve().parent.name}/{Path(__file__).name}"


def _version(dist: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _git() -> Dict[str, Any]:
    """Commit and dirty flag of the checkout that holds this package, else those the installed wheel recorded at
    its build; nulls when neither is known."""
    here = checkout_commit()
    if here["git_commit"] is None and BUILD_COMMIT.is_file():
        try:
            built = json.loads(BUILD_COMMIT.read_text())
            return {"git_commit": str(built["git_commit"]), "git_dirty": built.get("git_dirty")}
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return here


def checkout_commit(root: Path = _PROJECT_ROOT) -> Dict[str, Any]:
    """Commit and dirty flag of the git checkout whose top folder is ``root`` and which tracks this package; nulls
    otherwise (a package installed from a wheel: its site-packages may lie inside another repository, and ``pip
    install --target`` may put it at the top of one, the user's own: neither is named)."""

    def run(*args: str) -> Optional[str]:
        try:
            p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    top = run("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != root or run("ls-files", "--error-unmatch", "--", _TRACKED) is None:
        return {"git_commit": None, "git_dirty": None}
    status = run("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": run("rev-parse", "HEAD"), "git_dirty": None if status is None else bool(status)}


def device_info(device: Optional[str] = None) -> Dict[str, Any]:
    """``{"type", "name", "count"}`` for ``device`` (``cpu``, ``cuda``, ``cuda:1``; None: cuda if available)."""
    import torch

    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and torch.cuda.is_available():
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        return {"type": "cuda", "name": torch.cuda.get_device_name(idx), "count": torch.cuda.device_count(),
                "cuda": torch.version.cuda}
    if dev.type != "cpu":  # asked for a device this machine lacks: never label it with the CPU's name
        return {"type": dev.type, "name": "not available on this machine", "count": 0}
    name = platform.processor() or platform.machine()
    try:  # Linux: the CPU's model name
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"type": dev.type, "name": name, "count": os.cpu_count()}


def provenance(device: Optional[str] = None, stdlib: Optional[bool] = None) -> Dict[str, Any]:
    """The provenance block (see the module docstring).

    Args:
        device: the device the numbers were computed on (``cpu``, ``cuda:0``; None: cuda if available, else cpu).
        stdlib: include the stdlib corpus hash (None: when this process used the corpus, see
            ``stdlib_corpus.was_used``).
    """
    out: Dict[str, Any] = {
        "project": {"name": "torchtune-longshort", "version": __version__, **_git()},
        "packages": {p: _version(_DISTRIBUTIONS.get(p, p)) for p in PACKAGES},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
    }
    if stdlib or (stdlib is None and stdlib_corpus.was_used()):
        out["stdlib_corpus"] = stdlib_corpus.content_hash()
    out["device"] = device_info(device)
    return out


def provenance_markdown(block: Dict[str, Any]) -> str:
    """A short Markdown paragraph of a provenance block, for the reports."""
    proj, pk, py, dev = block["project"], block["packages"], block["python"], block["device"]
    commit = proj.get("git_commit")
    if not commit:
        commit = "no git checkout"
    else:
        commit = commit[:12] + (" (with uncommitted changes)" if proj.get("git_dirty") else "")
    lines = [f"- torchtune-longshort {proj['version']}, commit {commit}",
             "- " + ", ".join(f"{k} {v or 'not installed'}" for k, v in pk.items()),
             f"- Python {py['version']} ({py['implementation']})",
             f"- device: {dev['type']} ({dev.get('name')})"]
    if "stdlib_corpus" in block:
        s = block["stdlib_corpus"]
        lines.append(f"- stdlib corpus: sha256 {s['sha256'][:16]}… ({s['files']} files, {s['bytes']} bytes)")
    return "\n".join(lines)


def differs(recorded: Dict[str, Any], current: Dict[str, Any]) -> bool:
    """Whether a provenance block recorded with a result (when it was computed) differs from ``current`` in anything
    but the device: another commit, uncommitted changes, package versions, Python, or stdlib corpus."""
    return {k: v for k, v in recorded.items() if k != "device"} != {k: v for k, v in current.items() if k != "device"}
