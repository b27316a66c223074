"""Sparse parity (beyond the paper): targets recomputed from decoded tokens, exact sparsity, position-id schemes."""

import pytest
import torch

from torchtune_longshort.synthetic.sparsity_probes.sparse_parity import (
    BOS,
    PAD,
    SEP,
    ParityConfig,
    make_parity_batch,
    position_ids,
    score_parity,
)


def _decode(row, N):
    assert row[0] == BOS
    e = row.index(SEP)
    body = row[1:e]
    assert len(body) % 2 == 0 and all(t == PAD for t in row[e + 1 :])
    J = [t - PAD for t in body[0::2]]
    bits = body[1::2]
    assert all(1 <= j <= N for j in J) and all(b in (0, 1) for b in bits)
    return J, bits


def test_parity_targets_recomputed_from_tokens():
    g = torch.Generator().manual_seed(0)
    N = 20
    ls = torch.tensor([1, 3, 5, 10, 10, 40, 7, 2])
    ks = torch.tensor([1, 1, 3, 2, 10, 4, 7, 2])
    tok, sep, y, sel = make_parity_batch(ls, ks, N, g)
    for i, row in enumerate(tok.tolist()):
        J, bits = _decode(row, N)
        assert len(J) == ls[i] and sep[i] == 2 * ls[i] + 1
        chosen = [b for j, b in zip(J, bits) if j <= N // 2]
        assert len(chosen) == ks[i]  # exactly k indices <= N/2
        assert y[i] == sum(chosen) % 2


def test_parity_selected_positions_are_uniform():
    g = torch.Generator().manual_seed(1)
    _, _, _, sel = make_parity_batch(torch.full((6000,), 5), torch.full((6000,), 2), 20, g)
    # each of the 5 positions is selected with probability k/l = 0.4 (sd ~0.006)
    assert (sel.double().mean(0) - 0.4).abs().max() < 0.03


def test_parity_bad_input():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="every k must be in \\[1, l\\]"):
        make_parity_batch(torch.tensor([2]), torch.tensor([3]), 20, g)
    with pytest.raises(ValueError, match="N=7 must be an even number"):
        make_parity_batch(torch.tensor([2]), torch.tensor([1]), 7, g)
    with pytest.raises(ValueError, match="positions='abacus' is unknown"):
        ParityConfig(positions="abacus").validate()
    with pytest.raises(ValueError, match="needs pe 'rope' or 'learned'"):
        ParityConfig(pe="nope", positions="pose").validate()


def test_position_coupling_gives_pairs_one_id():
    ls = torch.tensor([3, 1])
    pos = position_ids(ls, 8, "couple", 100, None)
    assert pos[0].tolist()[:8] == [0, 1, 1, 2, 2, 3, 3, 4]  # BOS, (J1 t1), (J2 t2), (J3 t3), SEP


def test_pose_ids_increase_and_stay_in_range():
    g = torch.Generator().manual_seed(0)
    ls = torch.randint(1, 11, (500,), generator=g)
    s, max_pos = 22, 82
    pos = position_ids(ls, s, "pose", max_pos, g)
    n_tok = 2 * ls + 2
    jumps = 0
    for p, n in zip(pos.tolist(), n_tok.tolist()):
        p = p[:n]
        d = [b - a for a, b in zip(p, p[1:])]
        assert p[0] == 0 and all(x >= 1 for x in d) and p[-1] < max_pos
        assert sum(x > 1 for x in d) <= 1  # two chunks: at most one skip
        jumps += p[-1] >= 40
    assert jumps > 100  # short inputs do reach far position ids
    # test-time ids are the plain ones
    assert position_ids(ls, s, "pose", max_pos, None).tolist() == torch.arange(s).expand(500, s).tolist()


class _ParityOracle(torch.nn.Module):
    """Decodes each input and puts its logit on the true parity (or, ``wrong``, on the other bit)."""

    def __init__(self, N, wrong=False):
        super().__init__()
        self.N, self.wrong = N, wrong

    def forward(self, tokens, read_pos, position_ids=None):
        out = torch.zeros(tokens.shape[0], 2)
        for i, row in enumerate(tokens.tolist()):
            J, bits = _decode(row, self.N)
            out[i, (sum(b for j, b in zip(J, bits) if j <= self.N // 2) + self.wrong) % 2] = 1.0
        return out


class _Constant(torch.nn.Module):
    def forward(self, tokens, read_pos, position_ids=None):
        return torch.tensor([1.0, 0.0]).expand(tokens.shape[0], 2)


def test_scoring_a_perfect_a_wrong_and_a_constant_predictor():
    cfg = ParityConfig(pe="nope", test_ls=(3, 6), test_ks=(1, 3), test_n=40, seed=2)
    keys = {"1,3", "1,6", "3,3", "3,6"}
    assert score_parity(_ParityOracle(cfg.N), cfg) == {k: 1.0 for k in keys}
    assert score_parity(_ParityOracle(cfg.N, wrong=True), cfg) == {k: 0.0 for k in keys}
    # always "0": right exactly on the test inputs whose parity is 0; the test inputs are the seed's own stream
    g = torch.Generator().manual_seed(30_000 + 2)
    expected = {}
    for k in cfg.test_ks:
        for l in cfg.test_ls:
            _, _, y, _ = make_parity_batch(torch.full((40,), l), torch.full((40,), k), cfg.N, g)
            expected[f"{k},{l}"] = (y == 0).sum().item() / 40
    assert score_parity(_Constant(), cfg) == expected
    assert 0.0 < min(expected.values()) and max(expected.values()) < 1.0
