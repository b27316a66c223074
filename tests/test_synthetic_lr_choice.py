"""choose_runs on hand-made records (no training): the searched curve keeps the rate of the lowest validation MSE
(the docstring's rule, the paper's search), and a curve without a search whose own lr diverged fails in that run's own
line."""

import pytest

from torchtune_longshort.synthetic.lr_search import choose_runs
from torchtune_longshort.synthetic.run_cache import key
from torchtune_longshort.synthetic.train import Diverged, RunConfig

BASE = RunConfig(lr=1e-3)


def _ok(lr, val):
    return {"config": {"lr": lr}, "best_val_mse": val}


def _diverged(lr):
    return {"config": {"lr": lr}, "diverged": {"step": 3, "what": "training loss", "message": f"own line {lr:g}"}}


def test_the_kept_rate_has_the_lowest_validation_mse():
    vals = {1e-4: 0.5, 5e-4: 0.125, 1e-3: 2.0}
    trained = {key(RunConfig(lr=lr, seed=0)): _ok(lr, v) for lr, v in vals.items()}
    results, choice = choose_runs({"1b": [("NoPE", BASE)]}, [0], lambda c: list(vals), trained)
    want = min(vals, key=vals.get)
    assert choice["1b: NoPE: seed 0"]["chosen"] == want
    assert results[key(RunConfig(lr=BASE.lr, seed=0))]["best_val_mse"] == vals[want]


def test_an_unsearched_curves_divergence_is_its_runs_own_line():
    trained = {key(RunConfig(lr=BASE.lr, seed=0)): _diverged(BASE.lr)}
    with pytest.raises(Diverged) as e:
        choose_runs({"1b": [("NoPE", BASE)]}, [0], lambda c: None, trained)
    assert str(e.value) == "own line 0.001"
