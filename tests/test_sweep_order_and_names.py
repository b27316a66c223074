"""The length-swept tasks' row order and per-depth metric names, against their documented rules: ``--limit N`` (the
first N rows, lm-eval's rule) with N = the number of lengths scores every length (lengths.round_robin_order), and a
whole-number depth given as text names its metric as docs/longbench_babilong.md does (``acc_16k_d75``, not
``acc_16k_d75.0``)."""

from __future__ import annotations

from pathlib import Path

from torchtune_longshort.eval.tasks.common.lengths import per_depth, per_length, percentages, round_robin_order

DOCS = Path(__file__).resolve().parents[1] / "docs" / "longbench_babilong.md"


def test_limit_of_the_number_of_lengths_reaches_every_length():
    lengths, depths = [1024, 2048, 4096], [0, 50]
    cells = [(length, depth) for length in lengths for depth in depths for _ in range(2)]  # built length by length
    order = round_robin_order(cells)
    assert sorted(order) == list(range(len(cells)))
    assert {cells[i][0] for i in order[: len(lengths)]} == set(lengths)
    assert {cells[i] for i in order[: len(lengths) * len(depths)]} == set(cells)


def test_whole_number_depths_name_their_metrics_without_a_decimal():
    assert "`acc_16k_d75,none`" in DOCS.read_text()
    assert [per_depth(per_length("acc", 16 * 1024), d) for d in percentages("0, 75,100")] == [
        "acc_16k_d0", "acc_16k_d75", "acc_16k_d100"]
    assert percentages("12.5") == [12.5]
