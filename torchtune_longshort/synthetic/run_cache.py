"""The per-run cache of the paper figures (``--cache DIR``): one JSON per finished run, named by its config and
holding the *code key* of the code that produced it (a hash of the synthetic package's own source files and of the
window geometry its misalignment metric reads). An entry written by other code is not reused: the run is trained
again and its entry replaced, said in one line (an entry keyed by the config only was reused after the training or
evaluation code changed, silently giving the old code's numbers).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torchtune_longshort.windows as windows
from torchtune_longshort.output_guard import atomic_write_json
from torchtune_longshort.refusals import one_line

from .train import RunConfig

# the synthetic package's own modules (this folder's *.py; the sparsity probes, which never use the cache, apart)
PACKAGE_DIR = Path(__file__).resolve().parent
# the project's modules outside it whose code a run's numbers depend on
OUTSIDE_FILES = (Path(windows.__file__).resolve(),)

# what every run's result holds (a cache entry without them is not one: it is trained again) ...
RESULT_KEYS = ("config", "test_mse", "best_val_mse", "misalignment", "steps", "seconds")
# ... or, for a run whose learning rate diverged, what its record holds (``experiments.diverged_record``)
DIVERGED_KEYS = ("config", "diverged", "steps", "seconds")


def key(cfg: RunConfig) -> str:
    """A run's config as a canonical string: the key of its result everywhere (cache file name, results dicts)."""
    return json.dumps(asdict(cfg), sort_keys=True)


def code_key(folder: Path = PACKAGE_DIR, outside: Sequence[Path] = OUTSIDE_FILES) -> str:
    """16 hex digits of a SHA-256 over the name and bytes of every ``*.py`` file in ``folder`` (the synthetic
    package) and of the files ``outside``: it changes whenever the code that trains or evaluates a run changes (and,
    to stay simple and safe, when any other module of the package does)."""
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.py")) + sorted(Path(p) for p in outside):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_path(cache_dir: Optional[str], cfg: RunConfig) -> Optional[str]:
    """The cache entry of ``cfg`` in ``cache_dir`` (None without a cache)."""
    if cache_dir is None:
        return None
    return os.path.join(cache_dir, hashlib.sha1(key(cfg).encode()).hexdigest()[:16] + ".json")


def _is_record(res) -> bool:
    return isinstance(res, dict) and (all(k in res for k in RESULT_KEYS) or all(k in res for k in DIVERGED_KEYS))


def cached(path: str, code: str, stale: List[str]) -> Optional[Dict]:
    """The run result cached at ``path`` when the code key ``code`` wrote it; None when there is none, when it
    cannot be read or parsed (a file cut off by a full disk or a kill: then the run is trained again, said in one
    line naming the file), or when other code wrote it (then ``path`` is appended to ``stale``, for
    :func:`say_stale`'s one line)."""
    try:
        with open(path) as fh:
            res = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        why = one_line(e)
    else:
        if _is_record(res):
            if res.get("code_key") == code:
                return res
            stale.append(path)
            return None
        why = "not a run's result"
    print(f"warning: the cache entry {path} cannot be used ({why}): training that run again", file=sys.stderr,
          flush=True)
    return None


def say_stale(stale: Sequence[str], cache_dir: str, code: str) -> None:
    """One line when cache entries are trained again because the code that wrote them changed."""
    if stale:
        print(f"note: {len(stale)} cache entr{'y' if len(stale) == 1 else 'ies'} in {cache_dir} were written by other "
              f"code than this (code key {code}): training {'that run' if len(stale) == 1 else 'those runs'} again",
              file=sys.stderr, flush=True)


def store(cache_dir: Optional[str], cfg: RunConfig, res: Dict) -> None:
    """Write ``res`` (which carries its ``code_key``) as ``cfg``'s cache entry, whole or not at all; nothing
    without a cache."""
    p = cache_path(cache_dir, cfg)
    if p is not None:
        atomic_write_json(p, res, strict=False)  # read back as written: a diverged run's NaN stays NaN


def say_reused(reused: int, runs: int, cache_dir: str) -> None:
    """One line when runs are taken from the cache instead of trained (a rerun said nothing of them: its bar counted
    only the runs left, ``runs: 0it`` when the cache held them all)."""
    if reused:
        left = runs - reused
        print(f"note: {reused} of {runs} run{'' if runs == 1 else 's'} taken from --cache {cache_dir} (finished "
              f"earlier, by this code): {f'training the other {left}' if left else 'none to train'}",
              file=sys.stderr, flush=True)
