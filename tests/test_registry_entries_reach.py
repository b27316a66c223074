"""A RoPE method (a position-id sampler) is its own file and one ``ROPE_METHODS`` (``POSITION_SAMPLERS``) line: what
the recipe's setup asks of one reaches an entry registered there, not only the ones it was first written for.

Reference: the registered entry's own answer (a method's ``check_training_length``, the positions a sampler draws),
called directly."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from torch import nn

from torchtune_longshort.rope import ROPE_METHODS, CLEXRoPE, LinearRoPE, build_rope
from torchtune_longshort.training.recipe_config.rules import check_built_model


class _ShortDrawRoPE(LinearRoPE):
    """A method whose training draw reaches twice the length it is trained at (as CLEX's can)."""

    method = "short_draw"

    def check_training_length(self, seq_len: int, field: str = "seq_len") -> None:
        if 2 * seq_len > self.max_seq_len:
            raise ValueError(f"{field}={seq_len}: short_draw's training positions reach {2 * seq_len - 1}, past "
                             f"max_seq_len={self.max_seq_len}")


def _built(rope: nn.Module) -> nn.Module:
    """The parts of a built decoder that ``check_built_model`` reads, one attention holding ``rope``."""
    model = nn.Module()
    model.tok_embeddings = nn.Embedding(8, 4)
    model.max_seq_len = rope.max_seq_len
    model.layers = nn.ModuleList([nn.Module()])
    model.layers[0].pos_embeddings = rope
    return model


def _config(seq_len: int):
    return SimpleNamespace(seq_len=seq_len, validation=None, tokenizer=SimpleNamespace(path="tok"))


def test_a_registered_methods_training_length_rule_is_asked_by_the_setup(monkeypatch):
    """``check_built_model`` asked ``check_training_length`` of ``CLEXRoPE`` modules alone (an ``isinstance`` on
    that class): a method registered with its own rule trained past its positions at whichever step first drew
    far enough."""
    monkeypatch.setitem(ROPE_METHODS, "short_draw", _ShortDrawRoPE)
    rope = build_rope("short_draw", head_dim=8, max_seq_len=64, factor=2.0)
    with pytest.raises(ValueError) as own:
        rope.check_training_length(48)
    with pytest.raises(ValueError, match="^" + re.escape(str(own.value)) + "$"):
        check_built_model(_config(48), _built(rope), SimpleNamespace(vocab_size=8), {"method": "short_draw"})
    assert check_built_model(_config(32), _built(rope), SimpleNamespace(vocab_size=8), {"method": "short_draw"}) == 8


def test_clex_training_length_is_still_refused_by_the_setup():
    rope = CLEXRoPE(16, 2048, original_max_seq_len=512, t_max=4)
    with pytest.raises(ValueError) as own:
        rope.check_training_length(768)
    with pytest.raises(ValueError, match="^" + re.escape(str(own.value)) + "$"):
        check_built_model(_config(768), _built(rope), SimpleNamespace(vocab_size=8), {"method": "clex"})


@pytest.mark.parametrize("seq_len", [32, 33])
def test_clex_training_length_is_refused_where_a_drawn_position_reaches_max_seq_len(seq_len):
    """At the boundary: seq_len 33 over L=16 at t_max=2 draws position 32 on a 32-position model (the last index is
    31), refused; 32 draws up to 31, taken. Reference: the positions CLEX draws at t_max."""
    import torch

    rope = CLEXRoPE(16, 32, original_max_seq_len=16, t_max=2)
    top = float(rope.sample_training_positions(seq_len, 2, torch.Generator().manual_seed(0)).max())
    if top >= rope.max_seq_len:
        with pytest.raises(ValueError, match=f"^seq_len={seq_len}: CLEX's training positions reach {top:.0f} "):
            rope.check_training_length(seq_len)
    else:
        rope.check_training_length(seq_len)
    assert (top >= rope.max_seq_len) == (seq_len == 33)



def test_clex_refusals_advised_t_max_draws_below_max_seq_len_at_the_boundary():
    """seq_len 25 over L=16 on a 49-position model: t=2 reaches position 49 exactly, so the advice is t_max=1, not
    the t_max=2 that the length check refuses. Reference: the positions CLEX draws at each t the advice allows."""
    import torch

    with pytest.raises(ValueError) as refused:
        CLEXRoPE(16, 49, original_max_seq_len=16, t_max=3).check_training_length(25)
    t_fit = int(re.search(r"or set the model's t_max to (\d+)$", str(refused.value)).group(1))
    rope = CLEXRoPE(16, 49, original_max_seq_len=16, t_max=t_fit)
    rope.check_training_length(25)  # the advice is taken
    assert max(float(rope.sample_training_positions(25, t, torch.Generator().manual_seed(s)).max())
               for t in range(1, t_fit + 1) for s in range(8)) < rope.max_seq_len

class _StridedPositions:
    """A position-id sampler whose reach is its own parameter's: positions 0, stride, 2 stride, ..."""

    name = "strided"

    def __init__(self, stride: int, seq_len: int) -> None:
        self.stride, self.seq_len = stride, seq_len

    @property
    def position_bound(self) -> int:
        return self.stride * (self.seq_len - 1) + 1

    def sample(self, batch_size: int, seq_len: int, generator=None):
        import torch

        return (torch.arange(seq_len) * self.stride).expand(batch_size, seq_len)


@pytest.mark.parametrize("node, reach", [
    ({"name": "strided", "stride": 4, "seq_len": 32}, None),
    ({"name": "pose", "target_len": 200}, 200),
    ({"name": "random_pos", "max_position": 200}, 200),
])
def test_a_registered_samplers_reach_is_checked_against_the_models_positions(monkeypatch, node, reach):
    """The setup's check that a ``position_sampler`` stays inside the model's positions read ``max_position`` or
    ``target_len`` (random_pos's and PoSE's parameter names): a sampler registered in ``POSITION_SAMPLERS`` under
    another name went unchecked before training (its positions met the model's RoPE at the first forward).
    Reference: the positions it draws."""
    from omegaconf import OmegaConf

    from torchtune_longshort.rope import POSITION_SAMPLERS, build_position_sampler as registry_build
    from torchtune_longshort.training.data_setup import build_position_sampler

    monkeypatch.setitem(POSITION_SAMPLERS, "strided", _StridedPositions)
    drawn = int(registry_build(**node).sample(2, 32).max()) + 1
    reach = reach or drawn
    assert drawn <= reach
    cfg = OmegaConf.create({"_component_": "torchtune_longshort.rope.build_position_sampler", **node})
    with pytest.raises(ValueError, match=rf"^position_sampler draws positions up to {reach}, above the model's "
                                         rf"max_seq_len={drawn - 1}: "):
        build_position_sampler(cfg, drawn - 1, 0, None)
    sampler, _ = build_position_sampler(cfg, reach, 0, None)
    assert sampler.position_bound == reach


class _OwnRandomPositions:
    """A sampler of one's own written before ``position_bound`` (a ``max_position``, as random_pos has)."""

    def __init__(self, max_position: int) -> None:
        self.max_position = max_position

    def sample(self, batch_size: int, seq_len: int, generator=None):
        import torch

        return torch.randperm(self.max_position, generator=generator)[:seq_len].sort().values.expand(batch_size, -1)


class _OwnSkippedPositions:
    """A sampler of one's own written before ``position_bound`` with PoSE's parameter name, ``target_len``."""

    def __init__(self, target_len: int) -> None:
        self.target_len = target_len

    def sample(self, batch_size: int, seq_len: int, generator=None):
        import torch

        return torch.randperm(self.target_len, generator=generator)[:seq_len].sort().values.expand(batch_size, -1)


@pytest.mark.parametrize("cls, name", [(_OwnRandomPositions, "max_position"), (_OwnSkippedPositions, "target_len")])
def test_a_sampler_of_ones_own_without_position_bound_is_checked_by_its_max_position_or_target_len(cls, name):
    """The setup read ``max_position`` / ``target_len`` until 6065b68, which asks ``position_bound`` alone: a
    sampler of one's own with ``max_position`` (or ``target_len``) 1024 on a 256-position model then went unchecked
    before training. Reference: the positions it draws."""
    import torch
    from omegaconf import OmegaConf

    from torchtune_longshort.training.data_setup import build_position_sampler

    cfg = OmegaConf.create({"_component_": f"{__name__}.{cls.__name__}", name: 1024})
    assert int(cls(1024).sample(1, 512, torch.Generator().manual_seed(0)).max()) >= 256
    with pytest.raises(ValueError, match=r"^position_sampler draws positions up to 1024, above the model's "
                                         r"max_seq_len=256: "):
        build_position_sampler(cfg, 256, 0, None)
