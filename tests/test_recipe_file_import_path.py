"""``python <the recipe file>`` (and ``torchrun`` on it, which runs it as Python does) finds a module of one's own
beside the config, as ``tune run`` does: torchtune's CLI appends the current folder to ``sys.path``, while Python
puts the script's folder first and not the current one."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

import pytest
from user_modules import forget_user_module

# a divergence that imports but gives a scalar: the config check refuses it, naming what it gave (no run starts)
MY_DIVS = "import torch\n\n\ndef scalar(logits_p, logits_q):\n    return (logits_p - logits_q).float().mean()\n"


def _refusal(monkeypatch, capsys, path, argv, run) -> str:
    monkeypatch.setattr(sys, "path", path)
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as e:
        run()
    forget_user_module("my_divs")
    assert e.value.code == 2
    return capsys.readouterr().err


def test_python_on_the_recipe_file_imports_the_current_folders_module_as_tune_run_does(tmp_path, monkeypatch,
                                                                                        capsys):
    from torchtune._cli.tune import main as tune_main

    (tmp_path / "my_divs.py").write_text(MY_DIVS)
    monkeypatch.chdir(tmp_path)
    forget_user_module("my_divs")
    elsewhere = [p for p in sys.path if p not in ("", ".", str(tmp_path))]
    args = ["--config", "tiny/longshort_stdlib.yaml", "loss.divergence=my_divs.scalar", f"output_dir={tmp_path / 'o'}"]
    # the reference: torchtune's own tune run, in this process
    said = _refusal(monkeypatch, capsys, list(elsewhere),
                    ["tune", "run", "torchtune_longshort/recipes/longshort_finetune.py", *args], tune_main)
    assert "'my_divs.scalar' on two [2, 3, 5] float32 logit tensors gave a torch.float32 tensor of shape []" in said
    # python <the installed recipe file>: its own folder first on sys.path, the current one absent
    file = importlib.util.find_spec("torchtune_longshort.recipes.longshort_finetune").origin
    got = _refusal(monkeypatch, capsys, [str(Path(file).parent), *elsewhere], [file, *args],
                   lambda: runpy.run_path(file, run_name="__main__"))
    assert got == said
    assert "Traceback" not in got
    assert not (tmp_path / "o").exists()
