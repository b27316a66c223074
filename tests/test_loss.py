"""The loss against independent references: hand-computed Eq. 3, a naive per-suffix computation that runs the model
on every explicit context separately, and autograd of a naive full-logits implementation."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from torchtune_longshort.loss import LongShortLoss, mean_divergence, misalignment_loss, restore_model_output
from torchtune_longshort.loss.divergences import jeffreys_per_position, js_per_position, sce_per_position
from torchtune_longshort.windows import aligned_positions

V = 97


def tiny_decoder(seed=0, max_seq_len=64):
    from torchtune.models.llama2 import llama2

    torch.manual_seed(seed)
    m = llama2(vocab_size=V, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32,
               max_seq_len=max_seq_len, intermediate_dim=64)
    for p in m.parameters():  # torchtune leaves some weights at init scale 1; keep logits lively
        torch.nn.init.normal_(p, std=0.2) if p.dim() > 1 else None
    return m.eval()


# ---------------------------------------------------------------- divergences on hand-made distributions
def _logits(p):
    return torch.log(torch.tensor(p, dtype=torch.float64))


def test_sce_equals_eq3_on_hand_made_distributions():
    p, q = [0.5, 0.25, 0.25], [0.2, 0.3, 0.5]
    expected = -(sum(qi * math.log(pi) for pi, qi in zip(p, q)) + sum(pi * math.log(qi) for pi, qi in zip(p, q)))
    got = mean_divergence(_logits(p)[None], _logits(q)[None])
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(expected, rel=1e-6)
    # symmetric, and the self-divergence is twice the entropy (not 0): the listing's one-sided line is not Eq. 3
    assert mean_divergence(_logits(q)[None], _logits(p)[None]).item() == pytest.approx(expected, rel=1e-6)
    entropy = -sum(pi * math.log(pi) for pi in p)
    assert mean_divergence(_logits(p)[None], _logits(p)[None]).item() == pytest.approx(2 * entropy, rel=1e-6)
    one_sided = -sum(qi * math.log(pi) for pi, qi in zip(p, q))
    assert abs(got.item() - one_sided) > 0.1


def test_jeffreys_and_js_on_hand_made_distributions():
    p, q = [0.5, 0.25, 0.25], [0.2, 0.3, 0.5]
    kl = lambda a, b: sum(x * math.log(x / y) for x, y in zip(a, b))
    m = [(x + y) / 2 for x, y in zip(p, q)]
    assert jeffreys_per_position(_logits(p), _logits(q)).item() == pytest.approx(kl(p, q) + kl(q, p), rel=1e-6)
    assert js_per_position(_logits(p), _logits(q)).item() == pytest.approx((kl(p, m) + kl(q, m)) / 2, rel=1e-6)
    assert jeffreys_per_position(_logits(p), _logits(p)).item() == pytest.approx(0.0, abs=1e-7)
    # JS is bounded by ln 2 even for disjoint supports
    big = torch.tensor([[50.0, -50.0], [-50.0, 50.0]])
    assert js_per_position(big[0], big[1]).item() == pytest.approx(math.log(2), rel=1e-4)


def test_sce_mask_and_float32_from_bf16():
    a = torch.randn(2, 5, 11)
    b = torch.randn(2, 5, 11)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[0, 1] = mask[1, 3] = True
    per = sce_per_position(a, b)
    assert mean_divergence(a, b, mask).item() == pytest.approx(((per[0, 1] + per[1, 3]) / 2).item(), rel=1e-6)
    assert mean_divergence(a.bfloat16(), b.bfloat16()).dtype == torch.float32


def test_listing_log_softmax_without_dim_normalizes_over_the_batch():
    # Paper listing bug 2: log_softmax(x) without dim on [b, L, V] logits picks dim 0 (the batch). Ours uses the
    # vocabulary: a sample's divergence does not depend on which other samples share its batch.
    torch.manual_seed(0)
    a, b = torch.randn(2, 4, 7), torch.randn(2, 4, 7)
    ours_pair = sce_per_position(a, b)
    ours_alone = sce_per_position(a[:1], b[:1])
    torch.testing.assert_close(ours_pair[:1], ours_alone)
    with pytest.warns(UserWarning):
        implicit = F.log_softmax(a)  # what the listing computes
    assert not torch.allclose(implicit, F.log_softmax(a, dim=-1))
    torch.testing.assert_close(implicit, F.log_softmax(a, dim=0))


# ---------------------------------------------------------------- windows against explicit suffixes
def naive_dual_window_loss(model, tokens, L, e, alpha, floor_b_start):
    """Run the model on every explicit context separately; CE per window by gather; SCE by the formula."""
    bsz = tokens.shape[0]
    ce_terms = []
    for start in (0, e):
        win = tokens[:, start : start + L]
        lp = torch.log_softmax(model(win).double(), -1)
        nll = -lp[:, :-1].gather(-1, win[:, 1:, None])[..., 0]
        ce_terms.append(nll.mean())
    ce = (ce_terms[0] + ce_terms[1]) / 2
    vals = []
    for bi in range(bsz):
        for k in range(floor_b_start, L - e):  # window B position k <-> window A position k + e
            j = k + e
            ctx_a = tokens[bi : bi + 1, 0 : j + 1]  # window A's context: tokens 0..j
            ctx_b = tokens[bi : bi + 1, e : j + 1]  # window B's context: tokens e..j (k + 1 tokens)
            assert ctx_b.shape[1] == k + 1 and ctx_a.shape[1] == k + 1 + e
            p = torch.softmax(model(ctx_a)[0, -1].double(), -1)
            q = torch.softmax(model(ctx_b)[0, -1].double(), -1)
            vals.append(-((q * p.log()).sum() + (p * q.log()).sum()))
    mis = torch.stack(vals).mean() if vals else torch.zeros((), dtype=torch.float64)
    return ce, mis, ce + alpha * mis


@pytest.mark.parametrize("e", [1, 3, 8])
def test_batched_two_window_loss_equals_naive_per_suffix(e):
    L, alpha = 16, 0.3
    model = tiny_decoder()
    torch.manual_seed(1)
    tokens = torch.randint(0, V, (3, L + e))
    a, b = tokens[:, :L], tokens[:, e : e + L]
    la = torch.cat([a[:, 1:], torch.full((3, 1), -100)], 1)
    lb = torch.cat([b[:, 1:], torch.full((3, 1), -100)], 1)
    with torch.no_grad():
        ce_ref, mis_ref, loss_ref = naive_dual_window_loss(model, tokens, L, e, alpha, floor_b_start=L // 2)
        # logits path
        out = LongShortLoss(alpha=alpha, num_chunks=3)(model(a), model(b), la, lb, e)
        # hidden-state path (the model skips its output layer)
        loss_fn = LongShortLoss(alpha=alpha, num_chunks=5)
        loss_fn.set_model_output(model)
        out_h = loss_fn(model(a), model(b), la, lb, e)
        restore_model_output(model)
    for o in (out, out_h):
        assert o.ce.item() == pytest.approx(ce_ref.item(), rel=1e-5)
        assert o.misalignment.item() == pytest.approx(mis_ref.item(), rel=1e-5, abs=1e-7)
        assert o.loss.item() == pytest.approx(loss_ref.item(), rel=1e-5)
    assert out.num_aligned == max(0, L - e - L // 2)
    if e == L // 2:  # listing floor: empty comparison -> exactly the CE, not NaN
        assert out.num_aligned == 0 and out.misalignment.item() == 0.0


def test_the_recipes_loss_step_gives_window_a_and_b_to_the_loss_as_the_naive_reference():
    """The recipe runs cat([tokens_a, tokens_b]) in one forward and unstacks it: windows swapped there (or e, or the
    labels, passed wrong) changed the misalignment silently, and no test compared a recipe step with the equations
    (the recipe tests compare runs of the same code). Its _loss_step on one batch against the per-suffix reference."""
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.windows import slice_windows

    L, e, alpha = 16, 3, 0.3
    model = tiny_decoder()
    torch.manual_seed(3)
    tokens = torch.randint(0, V, (2, L + e))
    recipe = object.__new__(LongShortFinetuneRecipe)  # the step's inputs only: no setup, no config
    recipe._device, recipe._pos_sampler, recipe._forward = torch.device("cpu"), None, model
    recipe._loss_fn = LongShortLoss(alpha=alpha, num_chunks=3)
    with torch.no_grad():
        out = recipe._loss_step({**slice_windows(tokens, L, e), "e": e})
        ce_ref, mis_ref, loss_ref = naive_dual_window_loss(model, tokens, L, e, alpha, floor_b_start=L // 2)
    assert out.ce.item() == pytest.approx(ce_ref.item(), rel=1e-5)
    assert out.misalignment.item() == pytest.approx(mis_ref.item(), rel=1e-5)
    assert out.loss.item() == pytest.approx(loss_ref.item(), rel=1e-5)


def naive_full_logits_loss(logits_a, logits_b, la, lb, e, alpha, b_start):
    """Naive full-logits version written from the equations (no code shared with the library)."""
    ce = (F.cross_entropy(logits_a.flatten(0, 1), la.flatten(), ignore_index=-100)
          + F.cross_entropy(logits_b.flatten(0, 1), lb.flatten(), ignore_index=-100)) / 2
    L = logits_a.shape[1]
    n = L - e - b_start
    if n <= 0:
        return ce
    lpa = torch.log_softmax(logits_a[:, b_start + e : L].float(), dim=-1)
    lpb = torch.log_softmax(logits_b[:, b_start : L - e].float(), dim=-1)
    s = -((lpb.exp() * lpa).sum(-1) + (lpa.exp() * lpb).sum(-1))
    return ce + alpha * s.mean()


def _grads(model, fn):
    model.zero_grad()
    fn().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("e,num_chunks,recompute", [(2, 1, True), (5, 4, True), (5, 6, False), (8, 3, True)])
def test_gradients_match_naive_autograd(e, num_chunks, recompute):
    L, alpha = 16, 0.5
    model = tiny_decoder().train()
    torch.manual_seed(2)
    tokens = torch.randint(0, V, (2, L + e))
    a, b = tokens[:, :L], tokens[:, e : e + L]
    la = torch.cat([a[:, 1:], torch.full((2, 1), -100)], 1)
    lb = torch.cat([b[:, 1:], torch.full((2, 1), -100)], 1)
    ref = _grads(model, lambda: naive_full_logits_loss(model(a), model(b), la, lb, e, alpha, L // 2))

    loss_fn = LongShortLoss(alpha=alpha, num_chunks=num_chunks, recompute_logits=recompute)
    loss_fn.set_model_output(model)
    got = _grads(model, lambda: loss_fn(model(a), model(b), la, lb, e).loss)
    restore_model_output(model)
    model.set_num_output_chunks(3)
    got_chunks = _grads(model, lambda: LongShortLoss(alpha=alpha, num_chunks=num_chunks)(model(a), model(b), la, lb, e).loss)
    model.set_num_output_chunks(0)
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=1e-4, atol=1e-6, msg=name)
        torch.testing.assert_close(got_chunks[name], ref[name], rtol=1e-4, atol=1e-6, msg=name)


def test_empty_overlap_at_half_L_gives_zero_not_nan_and_finite_grads():
    # Paper listing bug 3: e = L/2 with the strict floor is an empty slice; its mean is NaN.
    L, e = 16, 8
    assert torch.tensor([]).mean().isnan()
    logits_a = torch.randn(2, L, V, requires_grad=True)
    logits_b = torch.randn(2, L, V, requires_grad=True)
    m = misalignment_loss(logits_a, logits_b, e)
    assert m.item() == 0.0
    m.backward()
    assert torch.all(logits_a.grad == 0) and torch.all(logits_b.grad == 0)
    # the inclusive floor (Eq. 4) compares exactly one position there
    assert aligned_positions(L, e, "inclusive").n == 1
    assert aligned_positions(L, e, "none").n == L - e


def test_positions_follow_the_issue_and_floors():
    L, e = 32, 5
    pos = aligned_positions(L, e)  # A: L/2+e .. L-1 ; B: L/2 .. L-1-e
    assert (pos.a_start, pos.b_start, pos.n) == (L // 2 + e, L // 2, L - e - L // 2)
    inc = aligned_positions(L, e, "inclusive")
    assert (inc.b_start, inc.n) == (L // 2 - 1, pos.n + 1)
    assert aligned_positions(L, L, "none").n == 0


def test_stop_grad_through_the_longer_window():
    L, e = 16, 3
    la = torch.randn(1, L, V, requires_grad=True)
    lb = torch.randn(1, L, V, requires_grad=True)
    misalignment_loss(la, lb, e, stop_grad_long=True).backward()
    assert la.grad is None and lb.grad.abs().sum() > 0
    labels = torch.randint(0, V, (1, L))
    la.grad = lb.grad = None
    out = LongShortLoss(alpha=1.0, stop_grad_long=True)(la, lb, labels, labels, e)
    ce_only = LongShortLoss(alpha=0.0)(la, lb, labels, labels, e)
    g_full = torch.autograd.grad(out.loss, la)[0]
    g_ce = torch.autograd.grad(ce_only.loss, la)[0]
    torch.testing.assert_close(g_full, g_ce)


def test_alpha_zero_reports_misalignment_without_training_it():
    L, e = 16, 2
    la, lb = torch.randn(2, L, V), torch.randn(2, L, V)
    labels = torch.randint(0, V, (2, L))
    out0 = LongShortLoss(alpha=0.0)(la, lb, labels, labels, e)
    out1 = LongShortLoss(alpha=0.1)(la, lb, labels, labels, e)
    assert out0.loss.item() == pytest.approx(out0.ce.item())
    assert out0.misalignment.item() == pytest.approx(out1.misalignment.item(), rel=1e-6)
    assert out0.misalignment.item() == pytest.approx(misalignment_loss(la, lb, e).item(), rel=1e-6)
    quiet = LongShortLoss(alpha=0.0, report_misalignment=False)(la, lb, labels, labels, e)
    assert quiet.misalignment.item() == 0.0 and quiet.loss.item() == pytest.approx(out0.loss.item())


@pytest.mark.parametrize("divergence", ["jeffreys", "js"])
def test_other_divergences_through_the_combined_loss(divergence):
    L, e = 16, 2
    la, lb = torch.randn(2, L, V), torch.randn(2, L, V)
    labels = torch.randint(0, V, (2, L))
    out = LongShortLoss(alpha=1.0, divergence=divergence, num_chunks=4)(la, lb, labels, labels, e)
    assert out.misalignment.item() == pytest.approx(
        misalignment_loss(la, lb, e, divergence=divergence).item(), rel=1e-5)


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match="alpha"):
        LongShortLoss(alpha=-0.1)
    with pytest.raises(ValueError, match="divergence"):
        LongShortLoss(divergence="kl")
    la, lb = torch.randn(1, 16, V), torch.randn(1, 16, V + 1)
    labels = torch.zeros(1, 16, dtype=torch.long)
    with pytest.raises(ValueError, match="vocab"):
        LongShortLoss()(la, lb, labels, labels, 2)
    with pytest.raises(ValueError, match="vocab"):
        misalignment_loss(la, lb, 2)
    with pytest.raises(ValueError, match=r"e=17"):
        LongShortLoss()(la, la, labels, labels, 17)
    # one e per batch: a DataLoader's collate gives a tensor of the samples' e, numpy an np.int64; the message said
    # "must be an int" without why or how
    for e in (torch.tensor([3, 3]), torch.tensor(3), np.int64(3)):
        with pytest.raises(TypeError, match=r"must be one int for the whole batch .* pass int\(e\)$"):
            LongShortLoss()(la, la, labels, labels, e)
    with pytest.raises(ValueError, match="even"):
        misalignment_loss(torch.randn(1, 15, V), torch.randn(1, 15, V), 2)
    with pytest.raises(ValueError, match="labels_a"):
        LongShortLoss()(la, la, labels[:, :8], labels, 2)
    with pytest.raises(ValueError, match="min_context"):
        aligned_positions(16, 2, "half")


def test_window_outputs_that_are_no_float_batch_of_positions_are_refused_naming_them():
    """Token ids, a 2-D tensor or an empty list where the windows' logits go: one line naming out_a / out_b (they
    failed inside the cross-entropy, or named the labels); misalignment_loss refused windows of different lengths
    only when the vocabulary differed too (B was cut at A's positions without a word)."""
    la, labels = torch.randn(2, 16, V), torch.zeros(2, 16, dtype=torch.long)
    loss = LongShortLoss()
    with pytest.raises(ValueError, match=r"^out_a has shape \(16, 97\): expected \[batch, L, vocab\] logits"):
        loss(la[0], la[0], labels, labels, 2)
    with pytest.raises(ValueError, match=r"^out_b has dtype torch.int64: expected .* in a floating dtype"):
        loss(la, labels[..., None].expand(2, 16, V).contiguous(), labels, labels, 2)
    with pytest.raises(ValueError, match=r"^out_a is an empty list"):
        loss([], [], labels, labels, 2)
    with pytest.raises(TypeError, match=r"^out_a is a str: .* its output's .logits"):
        loss("logits", la, labels, labels, 2)
    with pytest.raises(ValueError, match=r"^logits_a has 16 positions, logits_b 14: both windows hold L positions"):
        misalignment_loss(la, la[:, :14], 2)
    with pytest.raises(ValueError, match=r"^logits_a has dtype torch.int64: expected logits in a floating dtype"):
        mean_divergence(labels, labels)
