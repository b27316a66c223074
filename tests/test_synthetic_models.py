"""Synthetic models, theory and misalignment: closed forms vs exact enumeration vs Monte Carlo, the linear-attention
model's function class, padding/causality invariance, scalar misalignment vs hand computation, bad arguments."""

import numpy as np
import pytest
import torch
from synthetic_helpers import decode_bits

from torchtune_longshort.synthetic.misalignment import scalar_misalignment
from torchtune_longshort.synthetic.outrep import get_outrep
from torchtune_longshort.synthetic.models import LinearAttentionModel, SyntheticTransformer, alibi_slopes
from torchtune_longshort.synthetic.tasks import PAD, make_batch
from torchtune_longshort.synthetic.theory import (
    exact_class_optimum,
    fit_power_law,
    length_error_closed_form,
    sum_error_closed_form,
)
from torchtune_longshort.synthetic.train import RunConfig, train_run


def test_length_closed_form_is_thm_3_1_and_matches_enumeration():
    assert float(length_error_closed_form(50, 10)) == 1980.25
    ref = exact_class_optimum("length", 10, 50)
    np.testing.assert_allclose(ref["error"], length_error_closed_form(np.arange(1, 51), 10), rtol=1e-9)
    np.testing.assert_allclose(ref["coef"], [5.5, 0.0], atol=1e-9)
    assert max(exact_class_optimum("mean", 10, 50)["error"]) < 1e-20


@pytest.mark.parametrize("l_train", [1, 4, 10])
def test_sum_closed_form_binomial_matches_enumeration_doubled_does_not(l_train):
    l = np.arange(1, 41)
    ref = np.array(exact_class_optimum("sum", l_train, 40)["error"])
    np.testing.assert_allclose(sum_error_closed_form(l, l_train, "binomial"), ref, rtol=1e-9, atol=1e-12)
    # the factor-2 variant is off wherever B != l (every l except possibly one)
    assert np.mean(np.abs(sum_error_closed_form(l, l_train, "doubled")[1:] / ref[1:] - 1)) > 0.1


def test_sum_closed_form_against_monte_carlo():
    # independent of both the algebra and the enumeration: fit A + B*m by least squares on samples, then
    # measure its test error by sampling
    rng = np.random.default_rng(0)
    L, n = 10, 400_000
    l = rng.integers(1, L + 1, n)
    s = rng.binomial(l, 0.5)
    X = np.stack([np.ones(n), s / l], 1)
    coef = np.linalg.lstsq(X, s, rcond=None)[0]
    ls = np.arange(1, L + 1)
    H = 1 / np.mean(1 / ls)
    np.testing.assert_allclose(coef, [(ls.mean() - H) / 2, H], atol=0.03)
    for lt in (10, 30, 50):
        st = rng.binomial(lt, 0.5, n)
        mc = np.mean((coef[0] + coef[1] * st / lt - st) ** 2)
        assert mc == pytest.approx(float(sum_error_closed_form(lt, L)), rel=0.02)


def test_linear_attention_spans_a_plus_b_mean():
    torch.manual_seed(0)
    m = LinearAttentionModel(dim=2, query="eos")
    A, B = 0.7, -2.5
    with torch.no_grad():
        # e(0) = (1,0), e(1) = (0,1), read-out e(q) = (1,1); K = identity -> score = 1 for every bit;
        # V maps e(0) -> (A, 0), e(1) -> (A + B, 0); w = (1, 0) -> y = mean of V = A + B * mean(bits)
        m.embed.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        m.q.weight.copy_(torch.eye(2)); m.q.bias.zero_()
        m.k.weight.copy_(torch.tensor([[1.0, 1.0], [0.0, 0.0]])); m.k.bias.zero_()
        m.v.weight.copy_(torch.tensor([[A, A + B], [0.0, 0.0]])); m.v.bias.zero_()
        m.out.weight.copy_(torch.tensor([[1.0, 0.0]])); m.out.bias.zero_()
    g = torch.Generator().manual_seed(3)
    b = make_batch(torch.tensor([1, 2, 5, 9, 30]), "mean", g)
    expected = torch.tensor([A + B * sum(r) / len(r) for r in decode_bits(b.tokens)])
    torch.testing.assert_close(m(b.tokens, b.eos_pos), expected)


@pytest.mark.parametrize("pe", ["nope", "learned", "alibi", "rope"])
def test_transformer_prediction_ignores_right_padding(pe):
    torch.manual_seed(0)
    model = SyntheticTransformer(pe=pe, dim=16, num_layers=2, num_heads=2, max_len=40).eval()
    g = torch.Generator().manual_seed(0)
    b = make_batch(torch.tensor([3, 7, 12]), "sum", g)
    padded = torch.cat([b.tokens, torch.full((3, 20), PAD)], 1)
    with torch.no_grad():
        a = model(b.tokens, b.eos_pos)
        c = model(padded, b.eos_pos)
        single = torch.stack([model(b.tokens[i : i + 1, : int(b.eos_pos[i]) + 1], b.eos_pos[i : i + 1])[0] for i in range(3)])
    torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a, single, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="max_len=40") if pe in ("learned", "rope") else _noraise():
        model(torch.zeros(1, 41, dtype=torch.long), torch.tensor([40]))


class _noraise:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_alibi_slopes_geometric():
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]))
    with pytest.raises(ValueError, match="power of 2"):
        alibi_slopes(3)


def test_trained_linear_attention_reaches_theorem_3_1():
    # end to end: the App. C.1 model trained by our loop must land on the closed form (l - (L+1)/2)^2
    cfg = RunConfig(task="length", model="linear", dim=32, l_train=6, l_test=20, lr=1e-2, max_steps=300,
                    eval_every=50, val_size=512, test_per_length=20, seed=0)
    res = train_run(cfg)
    mse = np.array(res["test_mse"])
    ref = length_error_closed_form(np.arange(1, 21), 6)
    np.testing.assert_allclose(mse[6:], ref[6:], rtol=0.05)
    np.testing.assert_allclose(res["test_mse_f"], mse, rtol=1e-12)  # identity OutRep: f-space is the target scale


def test_learning_rate_decays_on_a_cosine_from_lr_to_zero():
    from torchtune_longshort.synthetic.train import _lr_at

    # 0.5 lr (1 + cos(pi step / max_steps)), step 0 .. max_steps (the paper's schedule)
    assert [_lr_at(s, 8, 0.1) for s in (0, 2, 4, 8)] == pytest.approx([0.1, 0.05 * (1 + 2**-0.5), 0.05, 0.0])


def test_the_trainers_updates_take_torchs_cosine_annealing_rates(monkeypatch):
    """The call site, against torch's CosineAnnealingLR(T_max=max_steps) stepped after each update: update k (of
    max_steps) takes 0.5 lr (1 + cos(pi (k - 1) / max_steps)), the first the full lr, none lr 0 (passing ``step``
    for ``step - 1`` skips the full lr and wastes the last update)."""
    seen = []

    class Recording(torch.optim.AdamW):
        def step(self, closure=None):
            seen.append(self.param_groups[0]["lr"])
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "AdamW", Recording)
    train_run(RunConfig(model="linear", l_train=4, l_test=4, max_steps=6, eval_every=6, batch_size=8, val_size=8,
                        test_per_length=1, lr=0.1))
    reference = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    schedule, want = torch.optim.lr_scheduler.CosineAnnealingLR(reference, T_max=6), []
    for _ in range(6):
        want.append(reference.param_groups[0]["lr"])
        reference.step()
        schedule.step()
    assert seen == pytest.approx(want, rel=1e-12)


class _MeanOracle(torch.nn.Module):
    """Outputs the exact mean of the bits (recomputed from tokens), or a constant."""

    def __init__(self, const=None):
        super().__init__()
        self.const = const

    def forward(self, tokens, read_pos, position_ids=None):
        if self.const is not None:
            return torch.full((tokens.shape[0],), float(self.const))
        bits = tokens[:, 1:-1]
        valid = torch.arange(bits.shape[1]).unsqueeze(0) < (read_pos - 1).unsqueeze(1)
        return (bits * valid).sum(1).float() / (read_pos - 1).float()


def test_scalar_misalignment_against_hand_computation():
    out = scalar_misalignment(_MeanOracle(), "mean", L=8, n_seq=5, seed=4)
    assert out["model_y"] == pytest.approx(out["target_y"], rel=1e-6)
    # hand computation: same sequences (same generator), variance over suffix means for m = 4..8
    from torchtune_longshort.synthetic.tasks import sample_bits

    x = sample_bits(torch.full((5,), 8), "iid", torch.Generator().manual_seed(4)).tolist()
    v = [np.var([sum(r[-m:]) / m for m in range(4, 9)]) for r in x]
    assert out["target_y"] == pytest.approx(float(np.mean(v)), rel=1e-9)
    # E(a - b)^2 / 2 over iid suffix lengths equals that variance
    pairs = [np.mean([(sum(r[-a:]) / a - sum(r[-b:]) / b) ** 2 for a in range(4, 9) for b in range(4, 9)]) / 2 for r in x]
    assert out["target_y"] == pytest.approx(float(np.mean(pairs)), rel=1e-9)
    assert scalar_misalignment(_MeanOracle(const=3.0), "length", L=8)["model_y"] == 0.0
    # length task's own spread over suffixes 4..8: variance of {4..8} = 2
    assert scalar_misalignment(_MeanOracle(const=3.0), "length", L=8)["target_y"] == pytest.approx(2.0)


def test_fit_power_law_recovers_exponent():
    x = np.arange(1, 40, dtype=float)
    fit = fit_power_law(x, 3 * x**2)
    assert fit["exponent"] == pytest.approx(2.0) and fit["coef"] == pytest.approx(3.0) and fit["r2"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(l_train=20, l_test=10), "l_test=10 < l_train=20"),
        (dict(pe="xpos"), "pe='xpos' is unknown; accepted: nope, learned, alibi, rope"),
        (dict(outrep="cube"), "outrep='cube' is unknown"),
        (dict(task="median"), "task='median' is unknown"),
        (dict(model="mamba"), "model='mamba' is unknown"),
    ],
)
def test_bad_run_config_fails_clearly(kw, msg):
    with pytest.raises(ValueError, match=msg):
        RunConfig(**kw).validate()


def test_log_of_zero_target_fails_clearly():
    cfg = RunConfig(task="sum", outrep="log", max_steps=1, l_train=3, l_test=3, dim=8, num_heads=2)
    # refused by the config's check, before the model is built (was: by OutRep.forward, after it)
    with pytest.raises(ValueError, match="outrep='log' needs targets in y > 0, but task='sum' has a target of 0"):
        train_run(cfg)
    with pytest.raises(ValueError, match="outrep='log' needs targets in y > 0, but a target is 0"):
        get_outrep("log").forward(torch.tensor([0.0, 1.0]))


def test_cli_rejects_bad_arguments(capsys):
    from torchtune_longshort.synthetic.__main__ import main

    assert main(["--l-train", "20", "--l-test", "10"]) == 2
    assert "--l-test=10 < --l-train=20" in capsys.readouterr().err  # the flags typed, not the run's fields
    assert main(["--pe", "xpos"]) == 2
    assert "pe='xpos' is unknown" in capsys.readouterr().err
    assert main(["--figure", "7z"]) == 2
    assert "figure='7z' is unknown" in capsys.readouterr().err
