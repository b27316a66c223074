"""A divergence of one's own must be a function of the two softmaxes: the fused loss path hands it
log-probabilities, the plain (checkpointed) path and the misalignment metric logits. One that is not (a logit MSE,
as distillation uses) trained on another function on the default path without a word; its probe now refuses it.
And an asymmetric one (KL(p||q) alone) gets, on the fused path, the gradient torch.autograd gives of the same
function on the full logits (the independent reference), with p the long window's."""

from __future__ import annotations


import pytest
import torch

from user_modules import forget_user_module, write_user_module

from torchtune_longshort.loss import LongShortLoss, divergences
from torchtune_longshort.loss.divergences import divergence_fn
from torchtune_longshort.windows import aligned_positions

SOURCE = '''
import torch.nn.functional as F


def kl_pq(logits_p, logits_q):
    lp, lq = F.log_softmax(logits_p.float(), -1), F.log_softmax(logits_q.float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def kl_pq_bf16(logits_p, logits_q):  # a function of the softmaxes, computed in bfloat16: not refused
    lp, lq = F.log_softmax(logits_p.bfloat16(), -1), F.log_softmax(logits_q.bfloat16(), -1)
    return (lp.exp() * (lp - lq)).sum(-1).float()


def logit_mse(logits_p, logits_q):
    return ((logits_p.float() - logits_q.float()) ** 2).mean(-1)


def kl_plus_logit_mse(logits_p, logits_q):  # distillation's mix: KL and a small logit-matching term
    return kl_pq(logits_p, logits_q) + 0.01 * logit_mse(logits_p, logits_q)


def kl_pq_f64(logits_p, logits_q):  # float64 out, where the fused path's values are float32
    return kl_pq(logits_p, logits_q).double()


def short_entropy(logits_p, logits_q):  # the short window's entropy: logits_p unused, autograd gives it no gradient
    lq = F.log_softmax(logits_q.float(), -1)
    return -(lq.exp() * lq).sum(-1)
'''


@pytest.fixture
def contract_divs(tmp_path, monkeypatch):
    write_user_module(tmp_path, {"contract_divs.py": SOURCE}, monkeypatch)
    yield "contract_divs"
    forget_user_module("contract_divs")


def test_a_divergence_of_the_logits_not_the_softmaxes_is_refused(contract_divs):
    with pytest.raises(ValueError) as info:
        divergence_fn(f"{contract_divs}.logit_mse")
    msg = str(info.value)
    assert msg.startswith("divergence='contract_divs.logit_mse': 'contract_divs.logit_mse' depends on the logits "
                          "other than through their softmaxes: ") and "\n" not in msg
    assert "moved its value by 16; " in msg
    assert msg.endswith("compute it from the softmaxes (log_softmax of each input, as the shipped ones do)")
    assert "contract_divs.logit_mse" not in divergences.PER_POSITION
    for shipped in ("sce", "jeffreys", "js"):  # each softmax-only: accepted by its path
        divergence_fn(f"torchtune_longshort.loss.divergences.{shipped}_per_position")
    divergence_fn(f"{contract_divs}.kl_pq_bf16")  # its rounding (7e-3 under the shift) is no dependence


def test_a_small_logit_term_beside_a_kl_is_refused_too(contract_divs):
    """KL + 0.01 * the logits' MSE: its value moves 0.16 under the shift (3x the bar of 5%), the MSE alone 16."""
    import contract_divs as module

    p, q = torch.randn(4, 7, generator=torch.Generator().manual_seed(0)).chunk(2)
    c = torch.full((2, 1), 3.0)
    torch.testing.assert_close(torch.softmax(p + c, -1), torch.softmax(p, -1))  # the shift leaves the softmaxes
    assert (module.kl_plus_logit_mse(p + c, q - c) - module.kl_plus_logit_mse(p, q)).abs().min() > 0.3  # 0.01 * 36
    with pytest.raises(ValueError, match=r"^divergence='contract_divs.kl_plus_logit_mse': .* depends on the logits "
                                         r"other than through their softmaxes: .* moved its value by 0\.16; "):
        divergence_fn(f"{contract_divs}.kl_plus_logit_mse")


def test_a_float64_divergence_is_refused_naming_its_dtype(contract_divs):
    import contract_divs as module

    assert module.kl_pq_f64(torch.zeros(2, 3, 5), torch.zeros(2, 3, 5)).dtype == torch.float64
    with pytest.raises(ValueError, match=r"^divergence='contract_divs.kl_pq_f64': 'contract_divs.kl_pq_f64' on two "
                                         r"\[2, 3, 5\] float32 logit tensors gave a torch.float64 tensor of shape "
                                         r"\[2, 3\]: a divergence of your own is .*, a float32 tensor of shape "
                                         r"\[2, 3\] here$"):
        divergence_fn(f"{contract_divs}.kl_pq_f64")
    assert "contract_divs.kl_pq_f64" not in divergences.PER_POSITION


def _fused(divergence, stop_grad_long, V=67, d=12, L=24, e=5):
    torch.manual_seed(0)
    out = torch.nn.Linear(d, V)
    ha, hb = torch.randn(2, L, d, requires_grad=True), torch.randn(2, L, d, requires_grad=True)
    labels = torch.randint(0, V, (2, L))
    grads = []
    for alpha in (0.5, 0.0):  # the difference: alpha times the divergence's gradient alone
        for t in (ha, hb, out.weight, out.bias):
            t.grad = None
        fn = LongShortLoss(alpha=alpha, divergence=divergence, num_chunks=3, stop_grad_long=stop_grad_long)
        fn.linear_projection = out
        assert fn.output_path == "fused"
        res = fn(ha, hb, labels, labels.roll(1, -1), e)
        res.loss.backward()
        grads.append([t.grad.clone() if t.grad is not None else torch.zeros_like(t) for t in (ha, hb, out.weight,
                                                                                             out.bias)])
    return res.misalignment, [g1 - g0 for g1, g0 in zip(*grads)]


def _reference(f, stop_grad_long, V=67, d=12, L=24, e=5):
    torch.manual_seed(0)
    out = torch.nn.Linear(d, V)
    ha, hb = torch.randn(2, L, d, requires_grad=True), torch.randn(2, L, d, requires_grad=True)
    a, b = out(ha), out(hb)
    if stop_grad_long:
        a = a.detach()
    ap = aligned_positions(L, e)
    mis = f(a[:, ap.a_start:ap.a_start + ap.n], b[:, ap.b_start:ap.b_start + ap.n]).mean()
    (0.5 * mis).backward()
    return mis.detach(), [t.grad if t.grad is not None else torch.zeros_like(t) for t in (ha, hb, out.weight,
                                                                                        out.bias)]


@pytest.mark.parametrize("stop_grad_long", [False, True])
def test_an_asymmetric_divergence_has_autograds_gradient_on_the_fused_path(contract_divs, stop_grad_long):
    import contract_divs as module

    mis, grads = _fused(f"{contract_divs}.kl_pq", stop_grad_long)
    ref_mis, ref_grads = _reference(module.kl_pq, stop_grad_long)
    swapped, _ = _reference(lambda p, q: module.kl_pq(q, p), stop_grad_long)
    assert abs(float(swapped) - float(ref_mis)) > 1e-3  # KL(q||p) differs: the test tells the order
    torch.testing.assert_close(mis, ref_mis, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, ref_grads):  # observed: 8e-9 apart at largest entries ~1e-2
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_a_function_of_one_window_alone_has_autograds_gradient_on_the_fused_path(contract_divs):
    """The long window's logits unused: autograd gives them no gradient (None), which is zero, not the block's
    log-probabilities left in place."""
    import contract_divs as module

    mis, grads = _fused(f"{contract_divs}.short_entropy", False)
    ref_mis, ref_grads = _reference(module.short_entropy, False)
    torch.testing.assert_close(mis, ref_mis, rtol=1e-5, atol=1e-6)
    assert float(ref_grads[0].abs().max()) == 0.0 and float(ref_grads[1].abs().max()) > 1e-3
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_eval_metadata_says_why_a_path_of_ones_own_is_refused(contract_divs):
    from torchtune_longshort.eval.tasks import TaskDataError, check_metadata_values

    with pytest.raises(TaskDataError) as info:
        check_metadata_values({"mis_divergences": f"js,{contract_divs}.logit_mse"})
    msg = str(info.value)  # the path imports: the reason is the registry's, as loss.divergence and the CLI say it
    assert msg.startswith("mis_divergences='js,contract_divs.logit_mse': expected divergence names among ")
    assert (" (divergence='contract_divs.logit_mse': 'contract_divs.logit_mse' depends on the logits other than "
            "through their softmaxes: ") in msg and msg.endswith("as the shipped ones do))")
    assert "moved its value by 16" in msg and "\n" not in msg


def test_eval_metadata_names_each_divergence_once_and_adds_no_reason_to_a_misspelt_name():
    """'js, sce,js' asks for js and sce (each once, in the order first given); 'js,jefreys' (no path: a shipped name
    misspelt) is told the accepted names alone, not the registry's 'is not known' again in parentheses."""
    from torchtune_longshort.eval.tasks import TaskDataError, check_metadata_values, divergence_names

    given = [n.strip() for n in "js, sce,js".split(",")]
    assert divergence_names("js, sce,js") == [n for i, n in enumerate(given) if n not in given[:i]] == ["js", "sce"]
    with pytest.raises(TaskDataError) as info:
        check_metadata_values({"mis_divergences": "js,jefreys"})
    assert str(info.value).startswith("mis_divergences='js,jefreys': expected divergence names among sce, ")
    assert str(info.value).endswith('a list, or one name or a comma list ("sce,js")'), str(info.value)
