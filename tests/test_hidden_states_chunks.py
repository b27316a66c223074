"""torchtune_longshort.hidden_states against torch's own functions on the full logits of a tiny plain-PyTorch
decoder: the chunked target log-probabilities and their greedy flag across chunk boundaries, the last position's
logits, the chunk size's closed form (its docstring: 524 positions of a 32k vocabulary, 130 of a 128k one) and the
logit output restored after the block."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchtune_longshort import hidden_states
from torchtune_longshort.hidden_states import (hidden_state_output, last_position_logits, output_rows,
                                               project_logprobs, project_target_logprobs, returns_hidden_states)

V, D = 11, 8


class _Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.tok_embeddings, self.norm, self.output = nn.Embedding(V, D), nn.LayerNorm(D), nn.Linear(D, V)

    def unembed(self, h):
        return self.output(self.norm(h))

    def forward(self, tokens):
        return self.unembed(self.tok_embeddings(tokens).cumsum(1))


@pytest.mark.parametrize("vocab, rows", [(32000, 524), (128256, 130), (11, 2048), (2**25, 1)])
def test_output_rows_is_the_closed_form(vocab, rows):
    assert output_rows(vocab) == rows  # min(2048, 2**24 // vocab), at least 1


def test_chunked_target_logprobs_and_greedy_equal_the_full_logits(monkeypatch):
    monkeypatch.setattr(hidden_states, "OUTPUT_CHUNK", 3)  # 7 rows: chunks of 3, 3, 1
    model = _Decoder()
    with torch.no_grad():
        hidden = model.norm(model.tok_embeddings(torch.arange(7)[None] % V).cumsum(1))[0]
        full = torch.log_softmax(model.output(hidden).float(), dim=-1)
        target = full.argmax(-1)
        lp, greedy = project_target_logprobs(model.output, hidden, target, V)
        torch.testing.assert_close(lp, full.gather(1, target[:, None])[:, 0], rtol=0, atol=1e-6)
        torch.testing.assert_close(project_logprobs(model.output, hidden, V), full, rtol=0, atol=1e-6)
        assert bool(greedy)
        for i in (0, 4, 6):  # a non-greedy target in each chunk
            other = target.clone()
            other[i] = (other[i] + 1) % V
            assert not bool(project_target_logprobs(model.output, hidden, other, V)[1])


def test_last_position_logits_are_the_models_last_row_and_logits_come_back():
    model = _Decoder()
    tokens = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    with torch.no_grad():
        want = model(tokens)[:, -1:]
        torch.testing.assert_close(last_position_logits(model, tokens), want, rtol=0, atol=1e-6)
        assert not returns_hidden_states(model) and model(tokens).shape == (2, 4, V)
        with hidden_state_output(model):
            with hidden_state_output(model) as decoder:  # nested: the outer block's hidden states stay
                pass
            assert model(tokens).shape == (2, 4, D) and decoder is model
        assert model(tokens).shape == (2, 4, V)
