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


@pytest.mark.parametrize("component, key", [("own_sampler_mod.ShiftedPositions", "target_len"),
                                            ("torchtune_longshort.rope.PoSEPositions", "target_len")])
def test_a_sampler_past_the_models_positions_is_refused_by_the_check_not_after_it_said_ok(
        tmp_path, monkeypatch, tiny_llama2_dir, sp_tokenizer_dir, capsys, component, key):
    """longshort-validate said OK to a position_sampler drawing up to 4096 positions on a 256-position model, and
    ``tune run`` refused it in its setup ('draws positions up to 4096, above the model's max_seq_len=256'). The config
    check now builds the sampler and asks it the setup's question (rope.samplers.check_position_bound). Reference:
    the positions it draws."""
    from torchtune_longshort.training.recipe_config.validate import main as validate_main

    (tmp_path / "own_sampler_mod.py").write_text(SAMPLER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("own_sampler_mod", None)
    from torchtune_longshort.config.values import resolve_component

    import torch
    drawn = resolve_component("x", component)(**{key: 4096}).sample(8, 64, torch.Generator().manual_seed(0))
    assert int(drawn.max()) >= 256  # it does draw past the model's 256 positions
    for bound, code in ((4096, 2), (256, 0)):
        OmegaConf.save(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out",
                                position_sampler={"_component_": component, key: bound}), tmp_path / "run.yaml")
        if code:
            with pytest.raises(SystemExit) as exit_info:
                validate_main(["run.yaml"])
            err = capsys.readouterr().err
            assert exit_info.value.code == 2 and err.count("\n") == 1, err
            assert ("position_sampler draws positions up to 4096, above the model's max_seq_len=256: scale RoPE to "
                    "at least that length (model.max_seq_len)") in err
        else:
            assert validate_main(["run.yaml"]) == 0
    sys.modules.pop("own_sampler_mod", None)
