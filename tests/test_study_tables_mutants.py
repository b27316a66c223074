"""Which run lands in which row and column of the study's tables, and the mean ± sd a cell shows: a hand mutant
(mutants38) of study/tables.py's build_tables handing each row only its first seed's run passed test_study_cells.py
and test_report_cell_text_edges.py (they build one cell at a time). Here every (method, alpha, seed, length) has its
own perplexity, and each cell is checked against numpy's mean and sample sd (ddof=1) of the runs it should hold."""

from types import SimpleNamespace as NS

import numpy as np
import pytest

from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.study.eval_config import metric_of
from torchtune_longshort.study.tables import build_tables

METHODS, ALPHAS, SEEDS, LENGTHS = ["pi", "yarn"], [0.0, 0.1], [0, 1, 2], [128, 256]


def _ppl(m, a, s, n):
    return 10.0 * (1 + METHODS.index(m)) + 100 * a + n / 128 + [0.0, 0.3, 1.1][s]


def test_each_cell_holds_its_method_alphas_seeds_at_its_length():
    runs = {(m, a): [NS(key=f"{m}_a{a:g}_s{s}", seed=s) for s in SEEDS] for m in METHODS for a in ALPHAS}
    cfg = NS(methods=METHODS, alphas=ALPHAS, runs_of=lambda m, a: runs[(m, a)],
             eval=NS(ppl_lengths=LENGTHS, misalignment_lengths=[], passkey_lengths=[], ppl_source="held-out",
                     babilong=None, babilong_lengths=[], longbench_e_data_dir=None, eval_base=False))
    recs = {}
    for (m, a), rs in runs.items():
        for r in rs:
            res = {}
            for n in LENGTHS:
                task, metric = metric_of("ppl", n)
                res.setdefault(task, {})[metric] = _ppl(m, a, r.seed, n)
            recs[r.key] = {"status": "ok", "results": res}
    t = build_tables(cfg, recs)["ppl"]
    assert t["columns"] == [length_label(n) for n in LENGTHS] and list(t["methods"]) == METHODS
    for m in METHODS:
        assert [row["alpha"] for row in t["methods"][m]] == ALPHAS
        for row in t["methods"][m]:
            for n in LENGTHS:
                want = [_ppl(m, row["alpha"], s, n) for s in SEEDS]
                cell = row["cells"][length_label(n)]
                assert cell["n"] == 3 and sorted(cell["values"].values()) == pytest.approx(sorted(want))
                assert cell["mean"] == pytest.approx(np.mean(want))
                assert cell["sd"] == pytest.approx(np.std(want, ddof=1))
