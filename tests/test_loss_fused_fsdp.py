"""The fused linear + CE + divergence path of ``LongShortLoss`` under FSDP2 (two CPU processes over gloo) against
autograd of test_loss_fused.py's naive full-logits loss over the whole global batch in one process: a plain, a tied
and a LoRA output, and validation's projection through a tied output whose weight FSDP2 holds sharded. Split from
test_loss_fused.py."""

from __future__ import annotations

import queue
import time

import pytest
import torch
import torch.nn.functional as F
from test_loss_fused import D, L, V, _batch, _fused_loss, _grads, _leaves, naive_loss
from torch import nn

from torchtune_longshort.loss.output_module import is_dtensor


# ---------------------------------------------------------------- FSDP2 (two CPU processes over gloo)
def _fsdp_worker(rank, world, init_file, q):
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        e, alpha, bsz = 3, 0.5, 2 * world
        la, lb = _batch(e, bsz=bsz, seed=11, holes=False)
        ha, hb, lin = _leaves(bsz=bsz, seed=11)
        ref, _ = naive_loss(ha, hb, lin.weight, None, la, lb, e, alpha, "sce", L // 2)
        w_ref = _grads(ref, (lin.weight,))[0].float()  # the whole global batch in one process
        shard = slice(rank * 2, rank * 2 + 2)
        ha_r, hb_r = ha.detach()[shard].clone().requires_grad_(), hb.detach()[shard].clone().requires_grad_()
        fully_shard(lin)  # the output as its own FSDP2 unit, as the recipe shards it
        loss_fn = _fused_loss(lin, alpha=alpha, num_chunks=3)
        path = loss_fn.output_path
        out = loss_fn(ha_r, hb_r, la[shard], lb[shard], e)
        out.loss.backward()  # FSDP2 averages the ranks' gradients in its reduce-scatter
        w_got = lin.weight.grad.full_tensor()
        q.put((rank, path, (w_got - w_ref).abs().max().item(), w_ref.abs().max().item()))
        for fused in (True, False):
            q.put((rank, *_tied_case(rank, world, fused, e, alpha, bsz, la, lb)))
        q.put((rank, *_lora_case(rank, world, e, alpha)))
    finally:
        dist.destroy_process_group()


class _Embedder(nn.Module):
    """A tied model's root FSDP2 unit in miniature: the token embedding, looked up in its forward and resharded
    after it; the loss then projects with the same (now sharded) weight through torchtune's ``TiedLinear``."""

    def __init__(self, weight):
        super().__init__()
        self.tok_embeddings = nn.Embedding.from_pretrained(weight.detach().clone(), freeze=False)

    def forward(self, ta, tb):
        return self.tok_embeddings(ta), self.tok_embeddings(tb)


def _tied_case(rank, world, fused, e, alpha, bsz, la, lb):
    """``(path, err, scale)``: the embedding's gradient (lookup + output projection) on this rank's half of the
    batch under FSDP2, against the whole batch's in one process without FSDP2."""
    from torch.distributed.fsdp import fully_shard
    from torchtune.modules import TiedLinear

    g = torch.Generator().manual_seed(23)
    weight = torch.randn(V, D, generator=g) * 0.4
    ta, tb = torch.randint(0, V, (bsz, L), generator=g), torch.randint(0, V, (bsz, L), generator=g)
    ref_model = _Embedder(weight)
    ref, _ = naive_loss(*ref_model(ta, tb), ref_model.tok_embeddings.weight, None, la, lb, e, alpha, "sce", L // 2)
    w_ref = _grads(ref, (ref_model.tok_embeddings.weight,))[0].float()
    model = _Embedder(weight)
    fully_shard(model, reshard_after_forward=True)
    shard = slice(rank * 2, rank * 2 + 2)
    ha, hb = model(ta[shard], tb[shard])
    loss_fn = _fused_loss(TiedLinear(model.tok_embeddings), alpha=alpha, num_chunks=3, fused=fused)
    out = loss_fn(ha, hb, la[shard], lb[shard], e)
    out.loss.backward()
    w_got = model.tok_embeddings.weight.grad.full_tensor()
    return loss_fn.output_path, (w_got - w_ref).abs().max().item(), w_ref.abs().max().item()


def _lora_case(rank, world, e, alpha):
    """``(path, err, scale)``: a LoRA output (its base weight frozen, as the recipe's LoRA) as its own FSDP2 unit,
    one sample per rank (the checkpointed path): ``lora_b``'s gradient against the whole batch's in one process. A
    chunk of a one-row batch keeps the stride of the whole window in its size-1 batch dimension; FSDP2's forward hook
    views its input (standard strides) and the checkpoint's recompute does not, so matmul folded the batch into mm in
    the forward and ran bmm in the recompute: torch's checkpoint refused ("Recomputed values ... have different
    metadata"), a crash at step 1 of a 2-process LoRA-on-output run with batch_size=2."""
    from torch.distributed.fsdp import fully_shard
    from torchtune.modules.peft import LoRALinear

    la, lb = _batch(e, bsz=world, seed=13, holes=False)
    ha, hb, lin = _leaves(bsz=world, seed=13)
    lora = LoRALinear(D, V, rank=4, alpha=8.0)
    with torch.no_grad():
        lora.weight.copy_(lin.weight)
        g = torch.Generator().manual_seed(5)  # the same adapters on every rank
        lora.lora_a.weight.normal_(std=0.3, generator=g)
        lora.lora_b.weight.normal_(std=0.1, generator=g)
    lora.weight.requires_grad_(False)
    w_eff = lora.weight + lora.lora_b.weight @ lora.lora_a.weight * (lora.alpha / lora.rank)
    ref, _ = naive_loss(ha, hb, w_eff, None, la, lb, e, alpha, "sce", L // 2)
    b_ref = _grads(ref, (lora.lora_b.weight,))[0].float()
    shard = slice(rank, rank + 1)
    ha_r, hb_r = ha.detach()[shard].clone().requires_grad_(), hb.detach()[shard].clone().requires_grad_()
    fully_shard(lora)
    loss_fn = _fused_loss(lora, alpha=alpha, num_chunks=3)
    out = loss_fn(ha_r, hb_r, la[shard], lb[shard], e)
    out.loss.backward()
    b_got = lora.lora_b.weight.grad.full_tensor()
    return "lora " + loss_fn.output_path, (b_got - b_ref).abs().max().item(), b_ref.abs().max().item()


@pytest.mark.slow
def test_fused_under_fsdp2_matches_single_process(tmp_path):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_fsdp_worker, args=(r, 2, tmp_path / "init", q)) for r in range(2)]
    for p in procs:
        p.start()
    results, deadline = [], time.time() + 240
    while len(results) < 4 * len(procs):  # a rank that dies fails the test now, not at the deadline
        try:
            results.append(q.get(timeout=2))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not dead and time.time() < deadline, f"worker exit codes {dead}, {len(results)} results"
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # per rank: the output as its own unit (fused), then a tied output whose weight the root unit holds (FSDP2 has
    # resharded it when the loss runs): fused, then checkpointed; a LoRA output, one sample per rank: checkpointed
    assert sorted(path for _, path, _, _ in results) == ["checkpointed"] * 2 + ["fused"] * 4 + ["lora checkpointed"] * 2
    for rank, path, err, scale in results:
        # each rank's loss is the mean over its half of the batch; FSDP2 averages them: the global-batch loss
        # when every rank holds the same number of targets (no holes here).
        assert err <= 1e-5 * max(1.0, scale), (rank, err, scale)


def test_validation_projects_a_tied_output_whose_weight_fsdp2_holds_sharded(tmp_path):
    """The recipe's validation under torchrun, tied embeddings (SmolLM2, Qwen2.5-0.5B, Gemma): FSDP2's root unit has
    resharded the embedding when the hidden states are projected. It raised "aten.mm.default got mixed torch.Tensor
    and DTensor" (a 2-process LoRA run of a tied Qwen2 died in its first validation); one process's gloo group
    shards the same way. Reference: full logits of the unsharded model, F.cross_entropy."""
    import copy
    import math

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torchtune.models.llama2._component_builders import llama2
    from torchtune.modules import TiedLinear

    from torchtune_longshort.training.validation import validation_metrics

    torch.manual_seed(0)
    model = llama2(vocab_size=96, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32, max_seq_len=32)
    del model.output
    model.output = TiedLinear(model.tok_embeddings)
    seqs = [torch.randint(0, 96, (24,)) for _ in range(2)]
    with torch.no_grad():
        ref = copy.deepcopy(model).eval()
        ce = sum(F.cross_entropy(ref(s[None])[0, :-1], s[1:], reduction="sum").item() for s in seqs) / (2 * 23)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model, reshard_after_forward=True)
        assert is_dtensor(model.tok_embeddings.weight)
        got = validation_metrics(model, seqs, torch.device("cpu"), 96)
    finally:
        dist.destroy_process_group()
    assert got["val_ce"] == pytest.approx(ce, rel=1e-6)
    assert got["val_ppl"] == pytest.approx(math.exp(ce), rel=1e-5)
