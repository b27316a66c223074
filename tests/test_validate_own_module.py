"""longshort-validate imports what ``tune run`` imports: torchtune's ``tune run`` appends the current folder to
``sys.path`` (user code beside the config), the ``longshort-validate`` console script did not, so a config naming a
component of the user's own module (a position sampler, a RoPE method's dotted path) that ``tune run`` trained was
refused by the check meant to say whether it will run: "position_sampler._component_=... does not import"."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf
from recipe_config import make_cfg

SAMPLER = '''
import torch


class ShiftedPositions:
    """Consecutive positions from a random offset below target_len."""

    def __init__(self, target_len):
        self.target_len = int(target_len)

    def sample(self, batch_size, seq_len, generator=None):
        off = torch.randint(0, self.target_len - seq_len + 1, (batch_size, 1), generator=generator)
        return off + torch.arange(seq_len)[None]

    @property
    def position_bound(self):
        return self.target_len
'''


def test_a_component_of_ones_own_module_in_the_current_folder_validates_as_tune_run_runs_it(
        tmp_path, monkeypatch, tiny_llama2_dir, sp_tokenizer_dir, capsys):
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    (tmp_path / "own_sampler_mod.py").write_text(SAMPLER)
    sampler = {"_component_": "own_sampler_mod.ShiftedPositions", "target_len": 256}
    OmegaConf.save(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", position_sampler=sampler),
                   tmp_path / "run.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "own_sampler_mod", raising=False)
    path = list(sys.path)
    assert validate_main(["run.yaml"]) == 0, capsys.readouterr().err
    assert sys.path == path  # the folder is on the path while the check runs only
    assert not (tmp_path / "out").exists()
    sys.modules.pop("own_sampler_mod", None)
    OmegaConf.save(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out",
                            position_sampler=dict(sampler, _component_="own_sampler_mod.Nope")), tmp_path / "bad.yaml")
    with pytest.raises(SystemExit) as exit_info:
        validate_main(["bad.yaml"])
    assert exit_info.value.code == 2
    assert "position_sampler._component_='own_sampler_mod.Nope' does not import" in capsys.readouterr().err
    sys.modules.pop("own_sampler_mod", None)
