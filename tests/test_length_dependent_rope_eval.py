"""The eval model with a RoPE whose rotation depends on the sequence's length (dynamic NTK's base, LongRoPE's factors,
CLEX's t; ``ScaledRoPE.length_dependent``), against one forward of each sequence alone (a numerics audit found both):

- a prompt longer than the prefill chunk (4096 tokens in use; 8 here) was prefilled chunk by chunk, each chunk
  under its own length's base or t: the first step's logits moved by 0.76 (dynamic NTK) and 1.22 (CLEX);
- with ``batch_size > 1`` a request was scored under its batch's padded width: the same 12 tokens scored -4.31 alone
  and -4.59 beside a 40-token request (dynamic NTK), -5.69 and -7.26 (LongRoPE)."""

from __future__ import annotations

import pytest
import torch

from torchtune_longshort.eval.model.generation import greedy_generate
from torchtune_longshort.eval.model.scoring import length_batches, score_continuations
from torchtune_longshort.hidden_states import decoder_of
from torchtune_longshort.models import apply_rope_scaling

L, VOCAB = 16, 50
METHODS = {"dynamic_ntk": {}, "clex": {}, "longrope": {"short_factor": [1.0] * 8, "long_factor": [4.0] * 8},
           "linear": {}}


def _model(method: str) -> torch.nn.Module:
    from torchtune.models.llama2 import llama2

    torch.manual_seed(0)
    model = llama2(vocab_size=VOCAB, num_layers=2, num_heads=2, num_kv_heads=2, embed_dim=32, max_seq_len=64)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.5)  # sharp: a base or factor that differs moves the logits
    apply_rope_scaling(model, method, max_seq_len=64, original_max_seq_len=L, **METHODS[method])
    return model.eval()


def _tokens(n: int, seed: int):
    return [1] + torch.randint(2, VOCAB, (n - 1,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("method", list(METHODS))
def test_a_prompt_prefilled_in_chunks_equals_one_forward(method):
    model = _model(method)
    prompt = _tokens(40, 1)
    with torch.no_grad():
        full = model(torch.tensor([prompt]))[0, -1]
    output, seen = decoder_of(model).output, []

    class Capture(torch.nn.Module):  # the logits greedy_generate decides the first token from
        def forward(self, h):
            seen.append(output(h))
            return seen[-1]

    decoder_of(model).output = Capture()
    try:
        for chunk in (4096, 8):  # one call; five calls, each under the 40-token prompt's rotation
            seen.clear()
            greedy_generate(model, [prompt], 2, pad_id=0, eos_id=-1, decode=str, dtype=torch.float32,
                            device=torch.device("cpu"), prefill_chunk=chunk)
            torch.testing.assert_close(seen[0][0], full, atol=2e-5, rtol=1e-5, msg=lambda m: f"chunk {chunk}: {m}")
    finally:
        decoder_of(model).output = output


@pytest.mark.parametrize("method", list(METHODS))
def test_a_request_scores_the_same_alone_and_batched(method):
    model = _model(method)
    short, long = (0, _tokens(12, 2), [7]), (1, _tokens(40, 3), [9])
    kw = dict(pad_id=0, vocab_size=VOCAB, device=torch.device("cpu"), disable_tqdm=True)
    alone = score_continuations(model, [short], batch_size=1, **kw)[0]
    batched = score_continuations(model, [short, long], batch_size=2, **kw)[0]
    assert batched[0] == pytest.approx(alone[0], abs=1e-4)


def test_length_batches_split_by_length_only_for_a_length_dependent_rope():
    lengths = [5, 5, 5, 3, 3, 2]
    for method, expected in (("dynamic_ntk", [[5, 5], [5], [3, 3], [2]]), ("linear", [[5, 5], [5, 3], [3, 2]])):
        assert list(length_batches(_model(method), lengths, 2, lambda n: n)) == expected
