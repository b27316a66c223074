"""A study YAML read and checked whole before anything is trained: :func:`load_study_config`.

The study's first two stages meet here: the config (:func:`~torchtune_longshort.study.config.read_config`: unknown
keys at every level with "did you mean", each value with its field named, the rules between fields; then the files
it names, :meth:`~torchtune_longshort.study.config.StudyConfig.check_files`) and the plan
(:func:`~torchtune_longshort.study.run_configs.check_recipe_overrides`: the recipe config of every run, as the runner
will write it, against the recipe's typed config).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

from torchtune_longshort.configs_cli import resolve_config
from torchtune_longshort.study.config import QUICK_REPLACES, StudyConfig, read_config, refused
from torchtune_longshort.study.run_configs import check_recipe_overrides


def load_study_config(path: str | Path, quick: bool = False, repo_root: Optional[Path] = None) -> StudyConfig:
    """Read, merge ``quick`` (when asked) and check a study YAML (a file, or a shipped config's name such as
    ``study/cpu_small.yaml``, as ``--config`` takes it); the :class:`StudyConfig`.

    Raises ``StudyConfigError`` naming the field, its value and what is accepted, before anything is trained.
    """
    root = Path(repo_root or Path.cwd()).resolve()
    if not (Path(path) if Path(path).is_absolute() else root / path).is_file():
        with contextlib.suppress(ValueError):  # not shipped either: read_config names the missing file
            path = resolve_config(str(path), root, "config")
    cfg = read_config(path, StudyConfig, "study", quick=quick, repo_root=root, quick_replaces=QUICK_REPLACES)
    refused(lambda: cfg.check_files(root))
    refused(lambda: check_recipe_overrides(cfg, root))
    return cfg
