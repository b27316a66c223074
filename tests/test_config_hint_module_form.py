"""A refusal whose hint is a longshort-cp command to run names its module form too: ``PYTHONPATH=DIR python -m
torchtune_longshort.training.recipe_config.validate nope.yaml`` (a ``pip install --target DIR`` user, no console
script on PATH, README's module form) said 'name one of `longshort-cp --list` ...', and ``python -m
torchtune_longshort.recipes.longshort_finetune --config nope.yaml`` 'copy a shipped config first: longshort-cp
tiny/longshort_stdlib.yaml nope.yaml', commands that user does not have. The reference is the named command itself,
run as the hint gives it with no console script on PATH: it lists the config the refusal offers, and writes a file
the refused config check then reads."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torchtune_longshort
from torchtune_longshort.configs_cli import MAIN_CONFIG, config_path, resolve_config
from torchtune_longshort.training.recipe_config.validate import read_config_file

MODULE_FORM = r"python -m torchtune_longshort\.configs_cli [^`(,]*[^`(, ]"


def _run_as_named(hint: str, cwd: Path) -> subprocess.CompletedProcess:
    found = re.search(MODULE_FORM, hint)
    assert found, f"no module form of longshort-cp in {hint!r}"
    env = {"PATH": os.defpath, "PYTHONPATH": str(Path(torchtune_longshort.__file__).parent.parent)}  # no scripts
    argv = [sys.executable] + found.group(0).split()[1:]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_the_list_hint_of_a_config_name_that_is_nothing_runs_without_the_script(tmp_path):
    with pytest.raises(ValueError) as refused:
        resolve_config("nope.yaml", tmp_path, "config", example=MAIN_CONFIG)
    done = _run_as_named(str(refused.value), tmp_path)
    assert done.returncode == 0, done.stderr
    offered = re.search(r"\(e\.g\. ([^)]+)\)", str(refused.value)).group(1)
    assert offered in done.stdout.split()


def test_the_copy_hint_of_a_missing_config_file_runs_without_the_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as refused:
        read_config_file(Path("my_run.yaml"))
    done = _run_as_named(str(refused.value), tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "my_run.yaml").read_bytes() == config_path(MAIN_CONFIG).read_bytes()
    assert read_config_file(Path("my_run.yaml"))  # the refusal's fix, done: the file is read
