"""The ``longshort`` model's length boundaries that no other test stood on (found by hand mutation of
``eval/model/limits.py`` and ``eval/model/divergence.py``):

- ``RequestLimits.check_length`` (``next_token_logprobs``, ``next_token_divergence``) runs a sequence of exactly
  ``max_length`` tokens, as lm-eval's ``hf`` runs one (its input ``(ctx + cont)[-(max_length + 1):][:-1]``), and
  refuses one token more; ``>=`` in its comparison passed every test.
- A ``next_token_divergence`` text of exactly ``max(l1, l2)`` tokens is scored, not refused as too short: its
  divergence equals Jeffreys' ``KL(p||q) + KL(q||p)`` by ``torch.nn.functional.kl_div`` on the two suffixes' logits.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torchtune.models.llama2 import llama2

from torchtune_longshort.eval.model.divergence import divergence
from torchtune_longshort.eval.model.limits import RequestLimits, RequestTooLong

MAX_LENGTH = 32


def test_check_length_runs_max_length_tokens_as_lm_eval_hf_does():
    limits = RequestLimits("longshort", MAX_LENGTH, MAX_LENGTH)
    hf_input = len(list(range(100))[-(MAX_LENGTH + 1):][:-1])  # lm-eval hf's longest model input
    limits.check_length(hf_input, "next_token_logprobs")
    with pytest.raises(RequestTooLong):
        limits.check_length(hf_input + 1, "next_token_logprobs")


def test_a_text_of_exactly_the_longer_suffix_is_scored():
    torch.manual_seed(0)
    model = llama2(vocab_size=64, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=16, max_seq_len=64).eval()
    ids = [7, 3, 12, 40, 2, 9, 33, 18]
    l1, l2 = len(ids), 5
    lm = SimpleNamespace(tokenizer=SimpleNamespace(encode_plain=lambda text: list(ids)), model=model,
                         limits=RequestLimits("longshort", MAX_LENGTH, MAX_LENGTH), device=torch.device("cpu"),
                         _out_of_memory=lambda *a: "out of memory")
    req = SimpleNamespace(args=("eight tokens", {"l1": l1, "l2": l2, "divergences": ["jeffreys"]}), task_name="t")
    got = divergence(lm, req)
    with torch.no_grad():
        lp = F.log_softmax(model(torch.tensor([ids[-l1:]]))[0, -1].float(), -1)
        lq = F.log_softmax(model(torch.tensor([ids[-l2:]]))[0, -1].float(), -1)
    ref = (F.kl_div(lq, lp, log_target=True, reduction="sum") + F.kl_div(lp, lq, log_target=True, reduction="sum"))
    assert not getattr(got, "refusal", "") and math.isfinite(got["jeffreys"])
    assert got["jeffreys"] == pytest.approx(float(ref), rel=1e-4, abs=1e-7)
