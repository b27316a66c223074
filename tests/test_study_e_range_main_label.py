"""Table 7's main range where the study sets it: the recipe config's own ``e_range``, ``recipe_overrides`` or the
method's ``overrides`` (not only ``finetune.overrides``). The claim's reason and the ``e_range_bars`` title named
[1, 'L/2'] whatever the main grid trained, and the paper's expectations (against U[1, L/2]) were applied to it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from plot_helpers import study
from torchtune_longshort.study.claim_figures import e_range_figure
from torchtune_longshort.study.claims import analyze
from torchtune_longshort.study.eval_config import metric_of

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs/tiny/longshort_stdlib.yaml"
MAIN = [1, "L/4"]  # the main grid's range, set in one place per case below
SEEDS = [0, 1, 2]


def _cfg(where, tmp_path):
    """A one-method study at L = 256 with a Table 7 variant, its main range ``MAIN`` set ``where``."""
    methods = {"pi": {"method": "linear", **({"overrides": {"e_range": MAIN}} if where == "method" else {})}}
    cfg = study(L=256, alphas=(0, 0.1), seeds=SEEDS, methods=methods, ppl_lengths=[256, 512],
                finetune={"max_steps": 1, "overrides": {"e_range": MAIN} if where == "finetune" else {}})
    raw = cfg.as_dict()
    raw["variants"] = {"e_range": {"method": "pi", "alpha": 0.1, "ranges": [["L/4", "L/2"], [1, "L"]]}}
    if where == "recipe_overrides":
        raw["recipe_overrides"] = {"e_range": MAIN}
    if where == "recipe_config":
        recipe = yaml.safe_load(RECIPE.read_text())
        assert recipe["e_range"] != MAIN  # else this case would not tell
        recipe["e_range"] = MAIN
        (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
        raw["recipe_config"] = str(tmp_path / "recipe.yaml")
    return type(cfg).from_mapping(raw)


def _records(cfg):
    """Each variant range's perplexity 1 above the main grid's, at every length, jittered per seed."""
    recs = {}
    for r in cfg.grid:
        res = {}
        for n in cfg.eval.ppl_lengths:
            task, metric = metric_of("ppl", n)
            res.setdefault(task, {})[metric] = 10 + r.seed + (1 + 0.01 * (r.seed - 1) if r.variant else 0.0)
        recs[r.key] = {"status": "ok", "results": res}
    return recs


@pytest.mark.parametrize("where", ["recipe_config", "recipe_overrides", "method", "finetune"])
def test_table7_names_the_main_range_the_main_grid_trained(where, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the study's recipe_config, as the runner reads it
    cfg = _cfg(where, tmp_path)
    claim = next(c for c in analyze(cfg, _records(cfg))["claims"] if c["id"] == "table7")
    assert claim["comparisons"] and all(c["expected"] is None for c in claim["comparisons"])  # none against U[1, L/4]
    assert claim["verdict"] == "not measurable here" and f"main range {MAIN}" in claim["reason"], claim["reason"]
    fig = e_range_figure(cfg, claim)
    titles = " ".join(t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text")))
    assert "main e ~ U[1, L/4]" in titles and "U[1, L/2]" not in titles, titles


def test_the_main_range_is_read_from_the_records_of_the_runs_that_trained_it(tmp_path, monkeypatch):
    """A report built from another folder (the study's recipe_config a relative file it cannot find there) reads the
    main range from the main grid's records (their spec's recipe config, as the runner wrote and trained it), not
    from the config file again; here the records say MAIN while the study config would give [1, L/2]."""
    monkeypatch.chdir(tmp_path)
    cfg = _cfg(None, tmp_path)
    recs = _records(cfg)
    for r in cfg.grid:
        if r.variant is None:
            recs[r.key]["spec"] = {"recipe_config": {"e_range": MAIN, "seq_len": 256}}
    claim = next(c for c in analyze(cfg, recs)["claims"] if c["id"] == "table7")
    assert claim["main_e_range"] == MAIN and f"main range {MAIN}" in claim["reason"], claim["reason"]
