"""The misalignment task's suffix-length range (``mis_min_frac`` / ``mis_max_frac``, fractions of each length L),
against the range ``misalignment_metric`` draws from when given the same lengths as ``min_len`` / ``max_len``
(a tiny model built here); a bad value refused before the run, and NaN with the reason under stock lm-eval."""

from __future__ import annotations

import json
import re

import pytest
import torch

pytest.importorskip("lm_eval")

N = 30  # draws per length: enough that every suffix length of the ranges below comes up, in the task and the API


class _Tiny(torch.nn.Module):
    """tokens [b, s] -> logits [b, s, vocab]: an embedding and a linear layer."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.out = torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(tokens).cumsum(1))


def _api_lengths(length: int, min_len, max_len):
    """The API's resolved range and the suffix lengths it drew over N sequences of ``length`` tokens."""
    from torchtune_longshort.metrics.misalignment import misalignment_metric

    seqs = [torch.randint(0, 32, (length,), generator=torch.Generator().manual_seed(i)) for i in range(N)]
    res = misalignment_metric(_Tiny(32), seqs, length=length, num_samples=N, min_len=min_len, max_len=max_len,
                              divergences=["js"], progress=False)
    return (res.min_len, res.max_len), {x for pair in res.pairs for x in pair}


def _task_lengths(sp_tokenizer_dir, lengths: str, **metadata):
    from torchtune_longshort.eval.tasks.misalignment.task import misalignment_dataset

    ds = misalignment_dataset(max_seq_lengths=lengths, tokenizer=str(sp_tokenizer_dir), mis_num_samples=N,
                              **metadata)["test"]
    assert not any(r["error"] for r in ds)
    return {int(L): {x for r in ds if r["length"] == int(L) for x in (r["l1"], r["l2"])} for L in lengths.split(",")}


def test_the_tasks_draws_span_the_apis_range_for_the_same_lengths(sp_tokenizer_dir):
    # before, the task drew from [L/2, L] whatever --metadata said: mis_min_frac was refused as a key no task reads
    got = _task_lengths(sp_tokenizer_dir, "8,20", mis_min_frac=0.25, mis_max_frac=0.5)
    for length, (lo, hi) in ((8, (2, 4)), (20, (5, 10))):
        api_range, api_drawn = _api_lengths(length, lo, hi)
        assert api_range == (lo, hi) and api_drawn == set(range(lo, hi + 1))
        assert got[length] == api_drawn
    # unset: the API's own default range, also at an odd L (floor(L/2), as windows.suffix_length_range)
    default = _task_lengths(sp_tokenizer_dir, "7")[7]
    api_range, api_drawn = _api_lengths(7, None, None)
    assert api_range == (3, 7) and default == api_drawn == set(range(3, 8))


@pytest.mark.parametrize("metadata, said", [
    ({"mis_min_frac": 0}, "mis_min_frac=0: expected a number in (0, 1]"),
    ({"mis_max_frac": "1.5"}, "mis_max_frac='1.5': expected a number in (0, 1]"),
    ({"mis_max_frac": 0.4}, "mis_min_frac 0.5 (its default) > mis_max_frac=0.4: give mis_min_frac <= mis_max_frac"),
])
def test_a_bad_fraction_is_nan_with_its_reason_under_stock_lm_eval(sp_tokenizer_dir, metadata, said):
    from torchtune_longshort.eval.tasks.misalignment.task import misalignment_dataset

    ds = misalignment_dataset(max_seq_lengths="16", tokenizer=str(sp_tokenizer_dir), mis_num_samples=2,
                              **metadata)["test"]
    assert len(ds) == 1 and said in ds[0]["error"]


def test_a_bad_fraction_is_refused_before_lm_eval_starts(tmp_path):
    from torchtune_longshort.eval.cli_run import run_cli

    with pytest.raises(ValueError, match=rf"^--metadata {re.escape('mis_min_frac=0.8 > mis_max_frac=0.6')}"):
        run_cli(["run", "--model", "longshort", "--model_args", f"checkpoint_dir={tmp_path / 'none'}",
                 "--device", "cpu", "--tasks", "longshort_misalignment",
                 "--metadata", json.dumps({"mis_min_frac": 0.8, "mis_max_frac": 0.6}),
                 "--output_path", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
