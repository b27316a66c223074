"""The pack's ``--seed`` note (its tasks draw from their own ``--metadata`` seeds) is said for both forms of the flag
lm-eval's own parser reads as a seed, ``--seed 1``, ``--seed=1`` and an abbreviation (``--see 1``: its ``run`` parser
allows them; the note was not said), and not without it."""

from __future__ import annotations

import sys

import pytest

from torchtune_longshort.eval.tasks.common.pack_task import _seed_given

BASE = ["run", "--model", "hf", "--tasks", "longshort_ppl"]


def _parse(argv):
    from lm_eval._cli.harness import HarnessCLI

    return HarnessCLI()._parser.parse_args(argv)


@pytest.mark.parametrize("tail", [[], ["--seed", "1"], ["--seed=1"], ["--see", "1"], ["--se=1"],
                                  ["--limit", "1"]])
def test_the_seed_note_follows_lm_evals_reading_of_the_seed_flag(tail, monkeypatch):
    given = _parse(BASE + tail).seed != _parse(BASE).seed  # lm-eval's parser: a seed other than its default
    monkeypatch.setattr(sys, "argv", ["lm-eval", *BASE, *tail])
    assert _seed_given() is given
