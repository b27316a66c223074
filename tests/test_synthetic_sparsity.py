"""Planted correlations and parity with a scratchpad (beyond the paper): every target recomputed from the decoded
tokens, placement and coupling ids checked against their definitions, the figure command end to end (quick)."""

import json
import os

import pytest
import torch
from plot_helpers import assert_png_drawn
from synthetic_helpers import csv_mean_accuracy

from torchtune_longshort.synthetic.sparsity_probes.figures import probe_figure
from torchtune_longshort.synthetic.sparsity_probes.planted_correlations import (
    P_BOS,
    P_PAD,
    P_SEP,
    PlantedConfig,
    make_planted_batch,
    score_planted,
)
from torchtune_longshort.synthetic.sparsity_probes.scratchpad_parity import (
    B0,
    P0,
    S_BOS,
    S_PAD,
    S_SEP,
    ScratchpadConfig,
    decode_scratchpad,
    make_scratchpad_batch,
    score_scratchpad,
    scratchpad_position_ids,
    train_scratchpad,
)


def _decode_planted(row, m, q):
    assert row[0] == P_BOS
    e = row.index(P_SEP)
    assert all(t == P_PAD for t in row[e + 1 :])
    body = row[1:e]
    assert all(3 <= t < 3 + m + q for t in body)
    return [(i, t - 3 - m) for i, t in enumerate(body) if t >= 3 + m], len(body)


@pytest.mark.parametrize("window", [0, 3, 5])
def test_planted_targets_recomputed_from_tokens(window):
    g = torch.Generator().manual_seed(window)
    m, q, k = 8, 4, 3
    ls = torch.tensor([3, 4, 9, 20, 5, 40, 3, 7] * 8)
    tok, sep, y, planted, values = make_planted_batch(ls, k, q, m, window, g)
    for i, row in enumerate(tok.tolist()):
        marks, n = _decode_planted(row, m, q)
        assert n == ls[i] and sep[i] == ls[i] + 1
        assert len(marks) == k  # exactly k planted tokens, the rest background
        assert y[i] == sum(v for _, v in marks) % q
        pos = [p for p, _ in marks]
        if window:
            assert max(pos) - min(pos) < window  # locality: the span of S is bounded by the window
        assert planted[i].nonzero().squeeze(1).tolist() == pos
        assert [values[i, p].item() for p in pos] == [v for _, v in marks]


def test_planted_spread_positions_uniform_and_labels_balanced():
    g = torch.Generator().manual_seed(0)
    n = 8000
    _, _, y, planted, _ = make_planted_batch(torch.full((n,), 10), 2, 4, 8, 0, g)
    # each of 10 positions planted with probability k/l = 0.2 (sd ~0.0045); labels uniform over q = 4
    assert (planted.double().mean(0) - 0.2).abs().max() < 0.02
    assert (torch.bincount(y, minlength=4).double() / n - 0.25).abs().max() < 0.02


def test_planted_window_placement_covers_the_sequence():
    g = torch.Generator().manual_seed(1)
    _, _, _, planted, _ = make_planted_batch(torch.full((4000,), 30), 2, 4, 8, 4, g)
    first = planted.double().argmax(1)
    span = 29 - planted.flip(1).double().argmax(1) - first
    assert int(span.max()) <= 3 and first.min() == 0 and first.max() >= 26  # windows slide over all of 0..29


def test_planted_bad_input():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="every length must be >= k=3"):
        make_planted_batch(torch.tensor([2]), 3, 4, 8, 0, g)
    with pytest.raises(ValueError, match="window=2 cannot hold k=3"):
        make_planted_batch(torch.tensor([5]), 3, 4, 8, 2, g)
    with pytest.raises(ValueError, match="must be 0 \\(spread\\) or >= k=3"):
        PlantedConfig(k=3, window=2).validate()


def _decode_scratch(row):
    assert row[0] == S_BOS
    e = row.index(S_SEP)
    bits = [t - B0 for t in row[1:e]]
    rest = [t for t in row[e + 1 :] if t != S_PAD]
    assert all(t == S_PAD for t in row[e + 1 + len(rest) :])
    return bits, [t - P0 for t in rest]


def test_scratchpad_targets_recomputed_from_tokens():
    g = torch.Generator().manual_seed(0)
    ls = torch.tensor([1, 2, 5, 10, 3, 17, 17, 4])
    tok, bits, running, target = make_scratchpad_batch(ls, g)
    for i, row in enumerate(tok.tolist()):
        b, pad = _decode_scratch(row)
        assert len(b) == len(pad) == ls[i] and set(b) <= {0, 1}
        acc = 0
        for j, bit in enumerate(b):
            acc ^= bit
            assert pad[j] == acc  # p_j = b_1 xor ... xor b_j
        assert target[i] == acc == sum(b) % 2
        assert bits[i, : ls[i]].tolist() == b and running[i, : ls[i]].tolist() == pad


def test_coupled_ids_pair_each_bit_with_its_scratch_token():
    g = torch.Generator().manual_seed(0)
    ls = torch.tensor([3, 1, 6])
    tok, _, _, _ = make_scratchpad_batch(ls, g)
    ids = scratchpad_position_ids(ls, tok.shape[1], "couple", 100, None)
    assert ids[0].tolist()[:8] == [0, 1, 2, 3, 0, 1, 2, 3]  # BOS, b1..b3, SEP, p1..p3
    for i, l in enumerate(ls.tolist()):
        for j in range(1, l + 1):
            assert ids[i, j] == ids[i, l + 1 + j] == j  # b_j and p_j share id j
        # the query that predicts p_j (p_{j-1}, or SEP for j = 1) sits at id j-1: b_j is always at relative id +1
        for j in range(1, l + 1):
            assert ids[i, l + j] == j - 1


def test_pose_ids_for_scratchpad_stay_in_range():
    g = torch.Generator().manual_seed(0)
    ls = torch.randint(1, 11, (300,), generator=g)
    ids = scratchpad_position_ids(ls, 22, "pose", 82, g)
    for p, l in zip(ids.tolist(), ls.tolist()):
        p = p[: 2 * l + 2]
        assert p[0] == 0 and all(b > a for a, b in zip(p, p[1:])) and p[-1] < 82


class _OracleParity(torch.nn.Module):
    """Reads its input and emits the right next scratchpad token (``wrong``: the other one), at the read positions
    or, without them, at every position from ``<SEP>`` on (teacher forcing); ``direct``: the whole parity at
    ``<SEP>``. Checks the decoding and scoring loops, not a trained model."""

    def __init__(self, direct=False, wrong=False):
        super().__init__()
        self.direct, self.wrong = direct, wrong

    def _next(self, row, i):
        e = row.index(S_SEP)
        bits = [t - B0 for t in row[1:e]]
        n = len(bits) if self.direct else i - e + 1  # scratch tokens p_1..p_n known once position i is read
        return P0 + (sum(bits[:n]) + self.wrong) % 2

    def forward(self, tokens, read_pos, position_ids=None):
        b, s = tokens.shape
        out = torch.full((b, s, 7), -1.0)
        for r, row in enumerate(tokens.tolist()):
            for i in range(row.index(S_SEP), s):
                out[r, i, self._next(row, i)] = 1.0
        return out if read_pos is None else out[torch.arange(b), read_pos]


def test_greedy_decoding_with_an_oracle_writes_the_true_scratchpad():
    g = torch.Generator().manual_seed(3)
    tok, _, running, _ = make_scratchpad_batch(torch.full((16,), 7), g)
    gen = decode_scratchpad(_OracleParity(), ScratchpadConfig(pe="nope"), tok[:, :9], 7, 16)
    assert torch.equal(gen, P0 + running)


def test_scratchpad_config_errors():
    with pytest.raises(ValueError, match="mode='chain' is unknown"):
        ScratchpadConfig(mode="chain").validate()
    with pytest.raises(ValueError, match="needs mode='scratchpad'"):
        ScratchpadConfig(mode="direct", positions="couple").validate()
    with pytest.raises(ValueError, match="needs pe 'rope' or 'learned'"):
        ScratchpadConfig(pe="alibi", positions="pose").validate()


@pytest.mark.slow
def test_beyond_cli_quick_planted_and_scratchpad(tmp_path):
    from torchtune_longshort.synthetic.__main__ import main

    out = str(tmp_path)
    assert main(["--figure", "planted,scratchpad", "--quick", "--seeds", "1", "--out", out]) == 0
    with open(os.path.join(out, "beyond_summary.json")) as fh:
        s = json.load(fh)
    assert set(s["meta"]) == {"planted,scratchpad"} and s["meta"]["planted,scratchpad"]["wall_seconds"] > 0
    assert set(s["planted"]) == {"k=1, spread", "k=2, spread", "k=3, spread", "k=2, window 3", "k=3, window 3"}
    assert set(s["scratchpad"]["scratchpad, RoPE + coupling"]["acc_mean"]) == {
        f"{m},{l}" for m in ("answer", "exact") for l in (3, 6, 12)}
    assert set(s["scratchpad"]["no scratchpad, RoPE"]["acc_mean"]) == {"answer,3", "answer,6", "answer,12"}
    for name in ("planted", "scratchpad"):
        with open(os.path.join(out, f"fig_{name}.csv")) as fh:
            assert fh.readline().strip() == "figure,curve,seed,group,l_test,accuracy"
        # the summary's seed means are the CSV's accuracies (4 decimals), curve by curve and point by point
        from_csv = csv_mean_accuracy(os.path.join(out, f"fig_{name}.csv"), name)
        assert set(from_csv) == set(s[name])
        for curve, acc in from_csv.items():
            assert acc == pytest.approx(s[name][curve]["acc_mean"], abs=5.01e-5)
        assert_png_drawn(os.path.join(out, f"fig_{name}.png"), 3.4 * 2, 4.4, 90)  # two panels, legends under


def test_coupled_training_offsets_keep_the_coupling():
    g = torch.Generator().manual_seed(0)
    ls = torch.randint(1, 11, (200,), generator=g)
    ids = scratchpad_position_ids(ls, 22, "couple", 82, g)
    plain = scratchpad_position_ids(ls, 22, "couple", 82, None)
    offs = []
    for i, l in enumerate(ls.tolist()):
        d = (ids[i, : 2 * l + 2] - plain[i, : 2 * l + 2]).unique()
        assert d.numel() == 1  # one offset for the whole sample: every id difference is unchanged
        offs.append(int(d))
        assert int(ids[i].max()) < 82
    assert max(offs) > 50  # short training samples reach far ids


def test_teacher_forced_step_accuracy_is_per_scratchpad_position():
    r = train_scratchpad(ScratchpadConfig(l_train=3, max_steps=3, dim=16, test_ls=(2, 5), test_n=16))
    assert [len(r["step_acc"][k]) for k in ("2", "5")] == [2, 5]
    assert all(float(a * 16).is_integer() for v in r["step_acc"].values() for a in v)  # fractions of 16 inputs
    # exact match of the whole greedy scratchpad can never beat the first step's teacher-forced accuracy
    assert r["acc"]["exact,5"] <= r["step_acc"]["5"][0]
    assert "step_acc" not in train_scratchpad(ScratchpadConfig(mode="direct", max_steps=2, dim=16, l_train=3,
                                                                 test_ls=(2,), test_n=8))


@pytest.mark.parametrize("wrong", [False, True])
def test_scratchpad_scores_of_a_perfect_and_an_always_wrong_predictor(wrong):
    right = 0.0 if wrong else 1.0
    cfg = ScratchpadConfig(pe="nope", test_ls=(2, 5), test_n=12)
    acc, step_acc = score_scratchpad(_OracleParity(wrong=wrong), cfg)
    assert acc == {f"{m},{l}": right for m in ("answer", "exact") for l in (2, 5)}
    assert step_acc == {"2": [right] * 2, "5": [right] * 5}
    direct = ScratchpadConfig(pe="nope", mode="direct", test_ls=(2, 5), test_n=12)
    assert score_scratchpad(_OracleParity(direct=True, wrong=wrong), direct) == ({"answer,2": right, "answer,5": right}, {})


class _PlantedOracle(torch.nn.Module):
    def __init__(self, m, q, wrong=False):
        super().__init__()
        self.m, self.q, self.wrong = m, q, wrong

    def forward(self, tokens, read_pos, position_ids=None):
        out = torch.zeros(tokens.shape[0], self.q)
        for i, row in enumerate(tokens.tolist()):
            marks, _ = _decode_planted(row, self.m, self.q)
            out[i, (sum(v for _, v in marks) + self.wrong) % self.q] = 1.0
        return out


@pytest.mark.parametrize("wrong, expected", [(0, 1.0), (1, 0.0)])
def test_planted_scores_of_a_perfect_and_an_always_wrong_predictor(wrong, expected):
    cfg = PlantedConfig(pe="nope", k=2, window=3, test_ls=(3, 9), test_n=24)
    assert score_planted(_PlantedOracle(cfg.m, cfg.q, wrong), cfg) == {"2,3": expected, "2,9": expected}


def _lines(fig):
    """{(panel title, line label): (x, y)} of every data line of a figure (legend-less helper lines skipped)."""
    return {(ax.get_title(), ln.get_label()): (list(ln.get_xdata()), list(ln.get_ydata()))
            for ax in fig.axes for ln in ax.get_lines() if not ln.get_label().startswith("_")}


def test_probe_figures_plot_the_table_values():
    import matplotlib.pyplot as plt

    row = {"l_train": 6, "chance": 0.5}
    parity = {"K_train=1": {**row, "k_train": 1, "acc_mean": {"1,3": 0.9, "1,12": 0.7, "2,3": 0.6, "2,12": 0.5}},
              "K_train=2": {**row, "k_train": 2, "acc_mean": {"1,3": 1.0, "1,12": 0.8, "2,3": 0.95, "2,12": 0.55}}}
    fig = probe_figure("parity", parity)
    assert _lines(fig) == {("K_train=1", "k=1"): ([3, 12], [0.9, 0.7]), ("K_train=1", "k=2 (> K_train)"): ([3, 12], [0.6, 0.5]),
                           ("K_train=2", "k=1"): ([3, 12], [1.0, 0.8]), ("K_train=2", "k=2"): ([3, 12], [0.95, 0.55])}
    plt.close(fig)
    scratch = {"no scratchpad, RoPE": {**row, "acc_mean": {"answer,12": 0.5, "answer,3": 0.75}},
               "scratchpad, RoPE": {**row, "acc_mean": {"answer,3": 1.0, "answer,12": 0.6, "exact,3": 0.9, "exact,12": 0.1}}}
    fig = probe_figure("scratchpad", scratch)
    assert _lines(fig) == {("final answer", "no scratchpad, RoPE"): ([3, 12], [0.75, 0.5]),
                           ("final answer", "scratchpad, RoPE"): ([3, 12], [1.0, 0.6]),
                           ("whole scratchpad", "scratchpad, RoPE"): ([3, 12], [0.9, 0.1])}
    plt.close(fig)
    planted = {"k=1, spread": {**row, "chance": 0.25, "acc_mean": {"1,3": 0.5, "1,6": 0.25}},
               "k=2, window 3": {**row, "chance": 0.25, "acc_mean": {"2,3": 0.75, "2,6": 1.0}}}
    fig = probe_figure("planted", planted)
    assert _lines(fig) == {("spread", "k=1"): ([3, 6], [0.5, 0.25]), ("window 3", "k=2"): ([3, 6], [0.75, 1.0])}
    plt.close(fig)
