"""Host-device syncs (``benchmarks/host_syncs.py``): on a GPU every host read of a device value waits for the queue
to drain; counted here on a CPU, by the tensors a GPU run would hold on the device."""

from __future__ import annotations

import pytest
import torch
from recipe_config import make_cfg
from test_eval_adapter import _lm, _reqs


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


def test_non_finite_loss_names_its_micro_batch_and_takes_no_step(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                 sp_tokenizer_dir):
    """The loss check reads the step's one device read (all micro-batches' terms): a NaN loss in the second of two
    micro-batches still names that micro-batch's e and values, and no optimizer step is taken."""
    r = recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=2,
                            gradient_accumulation_steps=2))
    r.setup()
    before = r._model.output.weight.detach().clone()
    loss_fn, seen = r._loss_fn, []

    def nan_in_second(*args):
        out = loss_fn(*args)
        seen.append((args[-1], out.ce.item()))
        if len(seen) == 2:
            out.loss = out.loss * float("nan")
        return out

    r._loss_fn = nan_in_second
    with pytest.raises(FloatingPointError) as err:
        r.train()
    r.release_output_dir()
    (e, ce), message = seen[1], str(err.value)
    assert len(seen) == 2
    assert message.startswith(f"non-finite loss nan at step 1 (rank 0), e={e}, data position ")
    assert f"(ce={ce}, misalignment=" in message and "); stopping before the optimizer step. No checkpoint" in message
    assert torch.equal(r._model.output.weight.detach(), before)


SCALED_NODE = {"_component_": "torchtune_longshort.models.rope_scaled", "max_seq_len": 256, "original_max_seq_len": 64}


@pytest.mark.parametrize("accum,rope", [(2, "default"), (1, "clex"), (1, "linear+pose")])
def test_a_training_step_reads_the_device_once(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, accum, rope):
    """On a GPU every host read of a device value waits for the queue to drain. A training step (its micro-batches,
    the loss and gradient-norm checks, clipping, the logged values) reads the device once: one ``tolist`` of the
    logged loss terms and the gradient norms. Counted on this CPU by ``benchmarks/host_syncs.py``, which tracks the
    tensors a GPU run holds on the device; it was 4 reads per micro-batch + 2 per step (+ 1 per CLEX forward, + 1
    per forward at a position sampler's ids)."""
    from benchmarks import host_syncs

    over = dict(save_every_n_steps=10**6, gradient_accumulation_steps=accum)
    if rope != "default":  # CLEX, or linear at a position sampler's ids (the RoPE's bounds check had its own read)
        over["model"] = {**SCALED_NODE, "method": rope.split("+")[0],
                         "model": {"_component_": "torchtune_longshort.models.hf_decoder",
                                   "checkpoint_dir": str(tiny_llama2_dir)}}
    if rope.endswith("+pose"):
        over["position_sampler"] = {"_component_": "torchtune_longshort.rope.PoSEPositions", "target_len": 256}
    counts = host_syncs.train_step_counts(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", **over))
    assert sum(counts.values()) == 1 and [op for op, _ in counts] == ["tolist"], counts


def test_a_batch_reads_the_device_once_and_a_token_once(tiny_llama2_dir, sp_tokenizer_dir):
    """On a GPU every host read of a device value waits for the queue to drain. A loglikelihood batch reads its
    scores once (it read 3 times per request: the greedy flag, the sum, the per-token values); generation reads
    once per token, the batch's new tokens (torchtune's KV cache read its fill once per layer per token as well).
    Counted on this CPU by ``benchmarks/host_syncs.py``, which tracks the tensors a GPU run holds on the device."""
    from benchmarks.host_syncs import SyncCounter

    prompts = ["def f(x):", "import collections\nimport itertools\n", "class"]
    with SyncCounter() as counter:
        lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size=4)
        with counter.counting():
            lm.loglikelihood(_reqs(), disable_tqdm=True)
        assert [op for op, _ in counter.counts] == ["tolist"] and counter.total == 1, dict(counter.counts)
        with counter.counting():
            lm.greedy_generate([lm.tok_encode(p) for p in prompts], max_new_tokens=6)
        assert [op for op, _ in counter.counts] == ["tolist"] and counter.total <= 6, dict(counter.counts)


def test_a_step_under_torchrun_reduces_once(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """Under torchrun (2 processes, gloo) a step's logged values' mean over ranks and the stop-signal check share
    one ``all_reduce`` and one device read, after the step's own read (before: 2 all-reduces and 3 reads, one of
    each for the mean and for the stop flag). Counted in each process by ``benchmarks/host_syncs.py``."""
    from benchmarks import host_syncs

    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", save_every_n_steps=10**6)
    for reads, collectives in host_syncs.distributed_step_counts(cfg):
        assert sum(collectives.values()) == 1, collectives
        assert sum(reads.values()) == 2 and {op for op, _ in reads} == {"tolist"}, reads


def test_a_validation_pass_reads_the_device_once(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """``validation_metrics`` (the recipe's val_ce) read each sequence's sum (3 reads for 3 sequences); now one read
    for the pass. Reference for the value: the full logits' log-softmax at each target (no chunks), summed in
    float64."""
    from benchmarks.host_syncs import SyncCounter
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.validation import validation_metrics

    validation = {"dataset": {"_component_": "torchtune_longshort.data.corpus.stdlib", "split": "heldout",
                              "min_bytes": 100000, "limit": 4}, "seq_len": 96, "num_sequences": 3}
    with SyncCounter() as counter:
        r = LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out",
                                             validation=validation))
        r.setup()
        r.release_output_dir()
        counter.watch(r._model)
        with counter.counting():
            val = validation_metrics(r._model, r._val_tokens, r._device, r.model_vocab)
    assert counter.total == 1 and len(r._val_tokens) == 3, dict(counter.counts)
    total, count = 0.0, 0
    with torch.no_grad():
        for row in r._val_tokens:
            hidden = r._model(row[None])[0, :-1]  # the recipe's decoder ends at its final norm (the loss projects)
            logp = torch.log_softmax(r._model.output(hidden).double(), dim=-1)
            total -= float(logp.gather(-1, row[1:, None]).sum())
            count += row.numel() - 1
    assert val["val_ce"] == pytest.approx(total / count, rel=1e-6)
