"""Which text goes in which cell of the claims tables (study/claims_markdown.py; mutants42): an interval's ends in
order, a coefficient at 3 significant digits, a '|' in a cell escaped, the extra columns of table7 and divergence,
"not recovered within L0" at L0 itself, and the base's other gate reading at exactly the gate.

References: Python's format ``{:.3g}`` / ``{:.4g}``; GitHub Markdown's table rule (an unescaped '|' starts a cell,
so a row has as many unescaped '|' as the header); the docstrings' rules."""

from __future__ import annotations

import re
from types import SimpleNamespace

from torchtune_longshort.study.claims_markdown import (_coefficient, _interval, base_section, ce_section,
                                                       claim_section, md_table)


def _cells(line: str) -> list:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_an_interval_and_a_coefficient_read_low_then_high():
    assert _interval({"mean": -0.5, "lo": -0.75, "hi": -0.25, "n": 3}) == (
        f"{-0.5:.4g} [{-0.75:.4g}, {-0.25:.4g}] (n=3)")
    assert _coefficient({"pearson": 0.81234, "pearson_lo": 0.51234, "pearson_hi": 0.95678}, "pearson") == (
        f"{0.81234:.3g} [{0.51234:.3g}, {0.95678:.3g}]")
    assert _coefficient({"spearman": 0.81234}, "spearman") == f"{0.81234:.3g} (no interval)"


def test_a_bar_in_a_cell_is_escaped_so_each_row_keeps_its_cells():
    lines = md_table(["a", "b"], [["x|y", "z"]])
    assert len(_cells(lines[0])) == len(_cells(lines[2])) == 2 and _cells(lines[2])[0] == r"x\|y"


def _comparison(**extra):
    return {"treated": "t", "control": "c", "family": "ppl", "length": 512, "mean": 1.0, "lo": 0.5, "hi": 1.5,
            "n": 3, "direction": "worse", **extra}


def test_table7_and_divergence_get_their_own_columns():
    for cid, extra in (("table7", {"e_range": "[1, 64]", "expected": "lower"}),
                       ("divergence", {"divergence": "kl", "alpha": 0.1})):
        md = claim_section({"id": cid, "verdict": "held", "paper": "p", "comparisons": [_comparison(**extra)]})
        header = next(line for line in md if line.startswith("| configuration"))
        row = md[md.index(header) + 2]
        cells = dict(zip(_cells(header), _cells(row)))
        assert all(cells[k] == str(v) for k, v in extra.items()), (cid, cells)
        assert cells["direction"] == "worse"


def test_a_method_not_recovered_at_l0_itself_is_named():
    rows = [{"method": "pi", "length": 256, "base": 10.0, "ce_mean": 11.0, "n": 2, "ratio": 1.1,
             "control": "does NOT recover the base"}]
    assert any(line.startswith("Not recovered within L0: pi at") for line in ce_section(rows, L0=256, L=512))
    assert not any(line.startswith("Not recovered") for line in ce_section(rows, L0=128, L=512))


def test_the_other_gate_reading_exactly_at_the_gate_is_not_below_it():
    cfg = SimpleNamespace(L0=64, base=SimpleNamespace(min_ppl_ratio=2.0, gate_measure="sequence"))
    base = {"sequence_ratio": 3.0, "position_ratio": 2.0, "late_position_ratio": 1.5, "rows": [], "bins": [],
            "curve_length": 256}
    assert not any("is below base.min_ppl_ratio" in line for line in base_section(base, cfg))
    base["position_ratio"] = 1.99
    assert any(line.startswith("The positions ratio (1.99) is below") for line in base_section(base, cfg))
