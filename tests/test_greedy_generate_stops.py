"""Where ``greedy_generate`` (``eval/model/generation.py``) stops a row, against the model's own free run (no EOS,
no stop string) of the same prompts: EOS ends a row and is left out, a stop string ends a row at the token that
completes it, even when the string spans two tokens, and a finished row takes no token more while the rest of its
batch goes on. A random tiny model rarely emits its EOS, so the adapter's tests never saw the EOS rule; a stop check
of the last token alone passed them too (``generate_until`` cuts the text at the stop string afterwards)."""

from __future__ import annotations

import torch
from torchtune.models.llama2 import llama2

from torchtune_longshort.eval.model.generation import greedy_generate

PAD, NO_EOS, STEPS = 0, -1, 10
PROMPTS = [[5, 9, 17, 3, 22], [40, 41]]


def _model():
    torch.manual_seed(0)
    return llama2(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=64).eval()


def _decode(ids):
    return "".join(f"<{i}>" for i in ids)


def _generate(model, eos_id=NO_EOS, stop=()):
    return greedy_generate(model, PROMPTS, STEPS, pad_id=PAD, eos_id=eos_id, decode=_decode, dtype=torch.float32,
                           device=torch.device("cpu"), stop=stop)


def test_eos_and_stop_strings_end_each_row_where_the_free_run_says():
    model = _model()
    free = _generate(model)
    assert all(len(row) == STEPS for row in free)
    # EOS: the first row's 4th free token; the row ends before its first occurrence, the other row runs on
    eos = free[0][3]
    got = _generate(model, eos_id=eos)
    for row, g in zip(free, got):
        assert g == (row[: row.index(eos)] if eos in row else row)
    # a stop string spanning the first row's 3rd and 4th tokens: the row ends with the 4th token
    stop = f"{free[0][2]}><{free[0][3]}"
    got = _generate(model, stop=[stop])
    for row, g in zip(free, got):
        ends = [n for n in range(1, STEPS + 1) if stop in _decode(row[:n])]
        assert g == row[: ends[0]] if ends else g == row
    assert len(got[0]) <= 4
