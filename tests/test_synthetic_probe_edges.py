"""Edges of the sparse-parity probe and its shared parts, against their docstrings: l ~ U{k..l_train} reaches
l_train, a position table for the longest test input (2l + 2 tokens), PoSE's last id reaching max_pos - 1, the
refusals before training, and fit's mean of the last 50 losses."""

import pytest
import torch
import torch.nn as nn

from torchtune_longshort.synthetic.sparsity_probes import sparse_parity
from torchtune_longshort.synthetic.sparsity_probes.positions import pose_ids
from torchtune_longshort.synthetic.sparsity_probes.probe_training import fit
from torchtune_longshort.synthetic.sparsity_probes.sparse_parity import ParityConfig, train_parity


def test_training_lengths_cover_k_to_l_train_and_the_longest_test_input_fits(monkeypatch):
    seen = []
    real = sparse_parity.make_parity_batch

    def spy(ls, ks, N, g):
        seen.append((torch.as_tensor(ls).clone(), torch.as_tensor(ks).clone()))
        return real(ls, ks, N, g)

    monkeypatch.setattr(sparse_parity, "make_parity_batch", spy)
    cfg = ParityConfig(N=4, l_train=3, k_train=2, pe="learned", test_ls=(2, 4), test_ks=(1, 2), dim=8, num_layers=1,
                       num_heads=2, batch_size=64, max_steps=4, test_n=4)
    res = train_parity(cfg)  # the test input of l = 4 pairs is 10 tokens: position ids 0..9 in the learned table
    assert set(res["acc"]) == {"1,2", "1,4", "2,2", "2,4"}
    ls = torch.cat([a for a, _ in seen[:4]])
    ks = torch.cat([b for _, b in seen[:4]])
    for k in (1, 2):
        assert set(ls[ks == k].tolist()) == set(range(k, 4))  # U{k..l_train}: l_train itself included


def test_test_sparsity_above_the_shortest_test_length_is_refused_before_training():
    with pytest.raises(ValueError, match="test_ks max 3 exceeds the shortest test length 2"):
        ParityConfig(test_ls=(2, 10), test_ks=(1, 3)).validate()


def test_pose_last_id_spans_n_tok_minus_1_to_max_pos_minus_1():
    g = torch.Generator().manual_seed(0)
    n_tok = torch.full((3000,), 4)
    ids = pose_ids(n_tok, 6, 10, g)
    assert set(ids[:, 3].tolist()) == set(range(3, 10))
    with pytest.raises(ValueError, match="a sequence of 11 tokens does not fit max_pos=10"):
        pose_ids(torch.tensor([4, 11]), 11, 10, g)


def test_fit_returns_the_mean_of_the_last_50_losses():
    w = nn.Parameter(torch.zeros(()))
    values = iter(range(120))

    def step_loss():
        return w * 0 + float(next(values))

    assert fit(_Holder(w), 1e-3, 120, step_loss) == sum(range(70, 120)) / 50


class _Holder(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w
