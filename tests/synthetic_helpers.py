"""Test helpers for the synthetic experiments: an independent decoder of ``make_batch``'s token layout, so that the
tests recompute every target from the tokens rather than trusting the generator, and the figures' CSVs read back
(the PNG check is ``plot_helpers.assert_png_drawn``)."""

from __future__ import annotations

import csv

import numpy as np
import torch

from torchtune_longshort.synthetic.tasks import BIT0, BIT1, BOS, EOS, PAD


def decode_bits(tokens: torch.Tensor) -> list[list[int]]:
    """For each row, the bits between ``<BOS>`` and ``<EOS>``; raises ``ValueError`` on a row that is not
    ``<BOS> bits <EOS> PAD*``."""
    out = []
    for r, row in enumerate(tokens.tolist()):
        if row[0] != BOS or EOS not in row:
            raise ValueError(f"row {r} is not '<BOS> bits <EOS> PAD*': {row}")
        e = row.index(EOS)
        body, tail = row[1:e], row[e + 1 :]
        if any(t not in (BIT0, BIT1) for t in body) or any(t != PAD for t in tail):
            raise ValueError(f"row {r} is not '<BOS> bits <EOS> PAD*': {row}")
        out.append(body)
    return out


def csv_mean_accuracy(path, figure: str) -> dict:
    """{curve: {"group,l": mean accuracy over the seeds' rows}} read back from a beyond figure's CSV."""
    rows: dict = {}
    with open(path) as fh:
        for r in csv.DictReader(fh):
            assert r["figure"] == figure
            rows.setdefault(r["curve"], {}).setdefault(f"{r['group']},{r['l_test']}", []).append(float(r["accuracy"]))
    return {c: {k: float(np.mean(v)) for k, v in d.items()} for c, d in rows.items()}
