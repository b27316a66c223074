"""The fused linear + CE + divergence path of ``LongShortLoss`` against autograd of a naive full-logits loss.

The reference below is written from the equations (full ``[b, L, V]`` logits, float64 log-softmaxes, the three
divergences' definitions) and shares no code with the library; the fused path's gradients come from its own
analytic formulas, computed in the forward pass.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchtune_longshort.loss import LongShortLoss, restore_model_output
from torchtune_longshort.windows import aligned_positions

V, D, L = 97, 24, 16
IGN = -100


class _StubDecoder(nn.Module):
    """Just what ``set_model_output`` needs: ``norm``, ``output`` and ``unembed`` (never run here)."""

    def __init__(self, output):
        super().__init__()
        self.norm = nn.Identity()
        self.output = output

    def unembed(self, h):  # pragma: no cover - replaced by set_model_output
        return self.output(h)


def _divergence_ref(name, za, zb):
    """Per-position divergence of float64 logits, from the definitions."""
    lp, lq = torch.log_softmax(za.double(), -1), torch.log_softmax(zb.double(), -1)
    p, q = lp.exp(), lq.exp()
    if name == "sce":
        return -((q * lp).sum(-1) + (p * lq).sum(-1))
    kl = lambda a, la, lb: (a * (la - lb)).sum(-1)  # noqa: E731
    if name == "jeffreys":
        return kl(p, lp, lq) + kl(q, lq, lp)
    m = (p + q) / 2
    return (kl(p, lp, m.log()) + kl(q, lq, m.log())) / 2


def naive_loss(ha, hb, weight, bias, la, lb, e, alpha, divergence, b_start, stop_grad_long=False):
    """Full logits of both windows; mean CE over non-ignored targets per window; mean divergence over the pairs."""
    za, zb = F.linear(ha, weight, bias).double(), F.linear(hb, weight, bias).double()
    ce_a = F.cross_entropy(za.flatten(0, 1), la.flatten(), ignore_index=IGN)
    ce_b = F.cross_entropy(zb.flatten(0, 1), lb.flatten(), ignore_index=IGN)
    ce = (ce_a + ce_b) / 2
    n = L - e - b_start
    if n <= 0:
        return ce, torch.zeros((), dtype=torch.float64)
    pa = za[:, b_start + e : L]
    if stop_grad_long:
        pa = pa.detach()
    mis = _divergence_ref(divergence, pa, zb[:, b_start : L - e]).mean()
    return ce + alpha * mis, mis


def _batch(e, bsz=2, seed=0, holes=True):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (bsz, L + e + 1), generator=g)
    la, lb = tokens[:, 1 : L + 1].clone(), tokens[:, e + 1 : e + L + 1].clone()
    la[:, -1] = IGN
    lb[:, -1] = IGN
    if holes:  # ignore_index inside the windows too (packed documents, masked prompts)
        la[0, 3] = IGN
        lb[-1, L // 2 + 1] = IGN
    return la, lb


def _leaves(dtype=torch.float32, bsz=2, seed=0, bias=False):
    g = torch.Generator().manual_seed(seed + 100)
    ha = (torch.randn(bsz, L, D, generator=g)).to(dtype).requires_grad_()
    hb = (torch.randn(bsz, L, D, generator=g)).to(dtype).requires_grad_()
    lin = nn.Linear(D, V, bias=bias, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(V, D, generator=g) * 0.4)
        if bias:
            lin.bias.copy_(torch.randn(V, generator=g))
    return ha, hb, lin


def _fused_loss(lin, **kw):
    loss_fn = LongShortLoss(**kw)
    loss_fn.set_model_output(_StubDecoder(lin))
    return loss_fn


def _grads(loss, tensors):
    return torch.autograd.grad(loss, tensors)


FLOORS = {"listing": L // 2, "inclusive": L // 2 - 1, "none": 0}


@pytest.mark.parametrize("divergence", ["sce", "jeffreys", "js"])
@pytest.mark.parametrize("min_context", ["listing", "inclusive", "none"])
@pytest.mark.parametrize("e", [1, 3, L // 2, L - 2])
@pytest.mark.parametrize("num_chunks", [1, 3, 7])
def test_fused_gradients_equal_naive_autograd(divergence, min_context, e, num_chunks):
    alpha = 0.7
    la, lb = _batch(e, seed=e)
    ha, hb, lin = _leaves(seed=num_chunks)
    b_start = FLOORS[min_context]
    assert aligned_positions(L, e, min_context).b_start == b_start
    ref, ref_mis = naive_loss(ha, hb, lin.weight, None, la, lb, e, alpha, divergence, b_start)
    g_ref = _grads(ref, (ha, hb, lin.weight))

    loss_fn = _fused_loss(lin, alpha=alpha, divergence=divergence, min_context=min_context, num_chunks=num_chunks)
    assert loss_fn.output_path == "fused"
    out = loss_fn(ha, hb, la, lb, e)
    g = _grads(out.loss, (ha, hb, lin.weight))
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert out.misalignment.item() == pytest.approx(ref_mis.item(), rel=1e-5, abs=1e-7)
    for name, got, want in zip(("ha", "hb", "weight"), g, g_ref):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("divergence", ["sce", "jeffreys", "js"])
def test_fused_stop_grad_long_bias_and_batch_of_three(divergence):
    e, alpha = 3, 1.3
    la, lb = _batch(e, bsz=3, seed=7)
    ha, hb, lin = _leaves(bsz=3, seed=7, bias=True)
    ref, _ = naive_loss(ha, hb, lin.weight, lin.bias, la, lb, e, alpha, divergence, L // 2, stop_grad_long=True)
    g_ref = _grads(ref, (ha, hb, lin.weight, lin.bias))
    loss_fn = _fused_loss(lin, alpha=alpha, divergence=divergence, stop_grad_long=True, num_chunks=4)
    out = loss_fn(ha, hb, la, lb, e)
    g = _grads(out.loss, (ha, hb, lin.weight, lin.bias))
    for name, got, want in zip(("ha", "hb", "weight", "bias"), g, g_ref):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-6, msg=name)
    # stop_grad_long: window A's rows get only their CE gradient
    ce_only = _fused_loss(lin, alpha=0.0, num_chunks=4)(ha, hb, la, lb, e)
    torch.testing.assert_close(g[0], _grads(ce_only.loss, (ha,))[0], rtol=1e-5, atol=1e-7)


def test_fused_alpha_zero_reports_divergence_and_trains_only_ce():
    e = 2
    la, lb = _batch(e)
    ha, hb, lin = _leaves()
    ce_ref, _ = naive_loss(ha, hb, lin.weight, None, la, lb, e, 0.0, "sce", L // 2)
    _, mis_ref = naive_loss(ha, hb, lin.weight, None, la, lb, e, 1.0, "sce", L // 2)
    out = _fused_loss(lin, alpha=0.0, num_chunks=3)(ha, hb, la, lb, e)
    assert out.loss.item() == pytest.approx(ce_ref.item(), rel=1e-5)
    assert out.misalignment.item() == pytest.approx(mis_ref.item(), rel=1e-5)
    for got, want in zip(_grads(out.loss, (ha, hb, lin.weight)), _grads(ce_ref, (ha, hb, lin.weight))):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-6)
    quiet = _fused_loss(lin, alpha=0.0, report_misalignment=False)(ha, hb, la, lb, e)
    assert quiet.misalignment.item() == 0.0


def test_fused_under_no_grad_and_grad_output_scaling():
    e, alpha = 5, 0.4
    la, lb = _batch(e)
    ha, hb, lin = _leaves()
    loss_fn = _fused_loss(lin, alpha=alpha, num_chunks=5)
    with torch.no_grad():
        out_ng = loss_fn(ha, hb, la, lb, e)
    ref, _ = naive_loss(ha, hb, lin.weight, None, la, lb, e, alpha, "sce", L // 2)
    assert out_ng.loss.item() == pytest.approx(ref.item(), rel=1e-5) and not out_ng.loss.requires_grad
    # backward scales the stored gradients by grad_output (gradient accumulation divides the loss)
    out = loss_fn(ha, hb, la, lb, e)
    (out.loss / 4).backward()
    want = _grads(ref / 4, (lin.weight,))[0]
    torch.testing.assert_close(lin.weight.grad, want.float(), rtol=1e-4, atol=1e-7)


def test_fused_bf16_within_bf16_tolerance_of_float64_reference():
    e, alpha = 3, 0.5
    la, lb = _batch(e)
    ha, hb, lin = _leaves(dtype=torch.bfloat16)
    loss_fn = _fused_loss(lin, alpha=alpha, num_chunks=4)
    out = loss_fn(ha, hb, la, lb, e)
    assert out.loss.dtype == torch.float32
    g = _grads(out.loss, (ha, hb, lin.weight))
    assert [t.dtype for t in g] == [torch.bfloat16] * 3
    # the reference: the same bf16 inputs in float64 (what the bf16 model's float32 math approximates)
    h64 = [t.detach().double().requires_grad_() for t in (ha, hb, lin.weight)]
    ref, _ = naive_loss(h64[0], h64[1], h64[2], None, la, lb, e, alpha, "sce", L // 2)
    g_ref = _grads(ref, h64)
    assert out.loss.item() == pytest.approx(ref.item(), rel=2e-2)
    for name, got, want in zip(("ha", "hb", "weight"), g, g_ref):
        torch.testing.assert_close(got.double(), want, rtol=5e-2, atol=2e-3, msg=name)


# (divergence, weight scale, relative error allowed): one vocabulary-long matmul gave 4.7e-5, 2.1e-5 and 1.3e-6 here
@pytest.mark.parametrize("divergence, scale, rel", [("sce", 1.0, 1e-5), ("jeffreys", 1.0, 1e-5), ("js", 0.3, 2e-7)])
def test_fused_float32_divergence_at_a_real_vocabulary_is_as_exact_as_the_unfused_path(divergence, scale, rel):
    # each <x, y> over the vocabulary was one float32 matmul: at a 49k vocabulary (SmolLM2's) the fused SCE was off
    # by 3e-5 and JS by 5e-4 relative to the float64 value, the unfused path by 1e-6 (an audit)
    vocab, e = 49152, 3
    g = torch.Generator().manual_seed(7)
    ha, hb = (torch.randn(1, L, D, generator=g) for _ in range(2))
    lin = nn.Linear(D, vocab, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(vocab, D, generator=g) * scale)
    la = torch.randint(0, vocab, (1, L), generator=g)
    lb = torch.randint(0, vocab, (1, L), generator=g)
    got = _fused_loss(lin, alpha=1.0, divergence=divergence, num_chunks=2)(ha, hb, la, lb, e).misalignment.item()
    za, zb = F.linear(ha, lin.weight).double(), F.linear(hb, lin.weight).double()
    want = _divergence_ref(divergence, za[:, L // 2 + e:], zb[:, L // 2: L - e]).mean().item()
    assert got == pytest.approx(want, rel=rel), (got, want)


def test_fused_under_autocast_computes_as_the_output_layer_would():
    """A float32 model under ``torch.autocast(bfloat16)``: the fused path failed in its first kernel (bf16 hidden
    states, float32 weight). It now computes the logits in autocast's dtype, as ``model.output(h)`` under autocast
    does; the reference is that unfused computation (naive autograd through the model's own output layer) under the
    same autocast. Mixed dtypes without autocast are refused in one line, as the model's own layer would refuse."""
    e, alpha = 3, 0.5
    la, lb = _batch(e)
    ha, hb, lin = _leaves()
    loss_fn = _fused_loss(lin, alpha=alpha, num_chunks=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = loss_fn(ha, hb, la, lb, e)
        za, zb = lin(ha), lin(hb)  # bf16 logits, as autocast makes them
    assert za.dtype == torch.bfloat16
    g = _grads(out.loss, (ha, hb, lin.weight))
    ce = (F.cross_entropy(za.float().flatten(0, 1), la.flatten(), ignore_index=IGN)
          + F.cross_entropy(zb.float().flatten(0, 1), lb.flatten(), ignore_index=IGN)) / 2
    ref = ce + alpha * _divergence_ref("sce", za.float()[:, L // 2 + e : L], zb.float()[:, L // 2 : L - e]).mean()
    g_ref = _grads(ref, (ha, hb, lin.weight))
    assert [t.dtype for t in g] == [torch.float32] * 3  # back through the casts to the float32 leaves
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-3)
    for name, got, want in zip(("ha", "hb", "weight"), g, g_ref):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3, msg=name)
    with pytest.raises(ValueError, match=r"^the hidden states are torch.bfloat16 \(A\) / torch.bfloat16 \(B\) but "
                                         r"the output weight is torch.float32: cast the model to one dtype"):
        loss_fn(ha.detach().bfloat16(), hb.detach().bfloat16(), la, lb, e)


def test_windows_of_different_batches_float_labels_or_logits_for_hidden_states_are_refused_naming_them():
    e = 3
    la, lb = _batch(e)
    ha, hb, lin = _leaves()
    loss_fn = _fused_loss(lin, alpha=0.5)
    with pytest.raises(ValueError, match=r"^batch sizes differ: out_a has 2 rows, out_b 1"):
        loss_fn(ha, hb[:1], la, lb, e)
    with pytest.raises(ValueError, match=r"^labels_b has dtype torch.float32; expected torch.long"):
        loss_fn(ha, hb, la, lb.float(), e)
    with pytest.raises(ValueError, match=rf"^out_a / out_b have last dimension {V} / {V} but the output layer takes "
                                         rf"{D}: after set_model_output the model returns its hidden states"):
        loss_fn(lin(ha), lin(hb), la, lb, e)  # logits where the set-up model gives hidden states


def test_the_fused_loss_under_torch_compile_gives_the_eager_loss_and_gradients_at_every_e():
    """A researcher's ``torch.compile(loss_fn)``: the fused path runs eager inside it (a graph break, as the recipe
    runs the loss); compiling it failed at the second e (dynamo's dynamic shapes refused its ``gather(out=)``)."""
    ha, hb, lin = _leaves()
    loss_fn = _fused_loss(lin, alpha=0.5, num_chunks=3)
    compiled = torch.compile(loss_fn, backend="eager")
    for e in (3, 5, L // 2 + 1):
        la, lb = _batch(e, seed=e)
        ref, ref_mis = naive_loss(ha, hb, lin.weight, None, la, lb, e, 0.5, "sce", L // 2)
        out = compiled(ha, hb, la, lb, e)
        assert out.loss.item() == pytest.approx(ref.item(), rel=1e-5)
        for got, want in zip(_grads(out.loss, (ha, hb, lin.weight)), _grads(ref, (ha, hb, lin.weight))):
            torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-6)
    torch._dynamo.reset()


def test_fused_and_checkpointed_paths_through_a_torchtune_decoder(caplog):
    """Whole model: parameter gradients of the fused and the checkpointed path both equal naive autograd; the
    path is logged once."""
    from torchtune.models.llama2 import llama2

    torch.manual_seed(0)
    model = llama2(vocab_size=V, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=64,
                   intermediate_dim=64)
    for p in model.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.2)
    e, alpha = 5, 0.5
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, V, (2, L + e), generator=g)
    a, b = tokens[:, :L], tokens[:, e : e + L]
    la = torch.cat([a[:, 1:], torch.full((2, 1), IGN)], 1)
    lb = torch.cat([b[:, 1:], torch.full((2, 1), IGN)], 1)

    def param_grads(fn):
        model.zero_grad()
        fn().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    def naive():
        za, zb = model(a), model(b)
        ce = (F.cross_entropy(za.flatten(0, 1), la.flatten()) + F.cross_entropy(zb.flatten(0, 1), lb.flatten())) / 2
        lo = L // 2
        return ce + alpha * _divergence_ref("js", za[:, lo + e :], zb[:, lo : L - e]).mean()

    ref = param_grads(naive)
    for fused in (True, False):
        loss_fn = LongShortLoss(alpha=alpha, divergence="js", num_chunks=3, fused=fused)
        with caplog.at_level(logging.INFO, logger="torchtune_longshort.loss.longshort_loss"):
            caplog.clear()
            loss_fn.set_model_output(model)
            got = param_grads(lambda: loss_fn(model(a), model(b), la, lb, e).loss)
            got = param_grads(lambda: loss_fn(model(a), model(b), la, lb, e).loss)
        restore_model_output(model)
        path = "fused" if fused else "checkpointed"
        assert loss_fn.output_path == path
        lines = [r.getMessage() for r in caplog.records if "LongShortLoss path" in r.getMessage()]
        assert len(lines) == 1 and lines[0].startswith(f"LongShortLoss path: {path}"), lines
        for n in ref:
            torch.testing.assert_close(got[n], ref[n], rtol=1e-4, atol=1e-6, msg=f"{path}: {n}")


def test_lora_output_falls_back_and_tied_output_fuses():
    from torchtune.modules import TiedLinear
    from torchtune.modules.peft import LoRALinear

    e, alpha = 3, 0.5
    la, lb = _batch(e)
    ha, hb, lin = _leaves()
    lora = LoRALinear(D, V, rank=4, alpha=8.0)
    with torch.no_grad():
        lora.weight.copy_(lin.weight)
        lora.lora_b.weight.normal_(std=0.1)
    loss_fn = _fused_loss(lora, alpha=alpha, num_chunks=3)
    assert loss_fn.output_path == "checkpointed"
    out = loss_fn(ha, hb, la, lb, e)
    w_eff = lora.weight + lora.lora_b.weight @ lora.lora_a.weight * (lora.alpha / lora.rank)
    ref, _ = naive_loss(ha, hb, w_eff, None, la, lb, e, alpha, "sce", L // 2)
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-5)
    for got, want in zip(_grads(out.loss, (ha, lora.lora_b.weight)), _grads(ref, (ha, lora.lora_b.weight))):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-6)

    emb = nn.Embedding(V, D)
    with torch.no_grad():
        emb.weight.copy_(lin.weight)
    loss_fn = _fused_loss(TiedLinear(emb), alpha=alpha, num_chunks=3)
    assert loss_fn.output_path == "fused"
    out = loss_fn(ha, hb, la, lb, e)
    ref, _ = naive_loss(ha, hb, emb.weight, None, la, lb, e, alpha, "sce", L // 2)
    torch.testing.assert_close(_grads(out.loss, (emb.weight,))[0], _grads(ref, (emb.weight,))[0].float(),
                               rtol=1e-4, atol=1e-6)
    assert _fused_loss(lin, fused=False).output_path == "checkpointed"
