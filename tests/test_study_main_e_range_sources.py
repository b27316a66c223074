"""Where :func:`main_e_range` finds Table 7's main range: the runs it reads (the variant's alpha, else the method's
main grid at any alpha; every one of them until one has a record, not only the first), a range the recipe config
leaves unset (the recipe's own default, read through its typed config), and no range at all without a variant."""

from __future__ import annotations

from pathlib import Path

import yaml

from torchtune_longshort.config.fields import with_own_defaults
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.run_configs import main_e_range
from torchtune_longshort.training.recipe_config import RecipeConfig

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs/tiny/longshort_stdlib.yaml"
MAIN, OTHER = [1, "L/4"], [1, "L/8"]


def _cfg(variant_alpha=0.1, recipe=None, method_range=MAIN):
    """pi at alphas 0 / 0.1, seeds 0 / 1, L = 256; its ``e_range`` ``method_range`` (None: unset); a Table 7 variant
    at ``variant_alpha`` (None: no variant)."""
    methods = {"pi": {"method": "linear", "overrides": {"e_range": method_range} if method_range else {}}}
    raw = {"name": "t", "recipe_config": str(recipe or RECIPE), "L0": 128, "L": 256,
           "base": {"pretrain": {"max_steps": 1}}, "model": yaml.safe_load(RECIPE.read_text())["model"],
           "finetune": {"max_steps": 1}, "methods": methods, "alphas": [0.0, 0.1], "seeds": [0, 1],
           "eval": {"ppl_lengths": [256]}}
    if variant_alpha is not None:
        raw["variants"] = {"e_range": {"method": "pi", "alpha": variant_alpha, "ranges": [["L/4", "L/2"]]}}
    return StudyConfig.from_mapping(raw)


def _trained(cfg, ranges):
    """Records of the main grid's runs: run key -> a result whose spec's recipe config trained ``ranges[alpha]``
    (a dict without ``e_range`` for ``"unset"``; no spec at all for None)."""
    recs = {}
    for r in cfg.main_grid:
        rc = ranges.get(r.alpha)
        recs[r.key] = {"status": "ok"} if rc is None else {
            "status": "ok", "spec": {"recipe_config": {"seq_len": 256, **({} if rc == "unset" else {"e_range": rc})}}}
    return recs


def test_no_e_range_variant_has_no_main_range():
    assert main_e_range(_cfg(variant_alpha=None), ROOT) is None


def test_a_variant_alpha_outside_the_main_grid_reads_the_methods_main_runs():
    # no main-grid run at alpha 0.3: the range is the method's main grid's (the study config's, at any alpha)
    assert main_e_range(_cfg(variant_alpha=0.3), ROOT) == MAIN


def test_the_runs_at_the_variants_alpha_are_read_not_the_other_alphas():
    cfg = _cfg(method_range=None)  # the study config alone would give the recipe's default, the records MAIN
    assert [r.alpha for r in cfg.main_grid][0] == 0.0  # the alpha-0 runs come first: else this case would not tell
    assert main_e_range(cfg, ROOT, records=_trained(cfg, {0.0: OTHER, 0.1: MAIN})) == MAIN


def test_a_first_run_without_a_record_is_passed_over():
    cfg = _cfg(method_range=None)
    assert _recipe_default() != MAIN  # else the study config would give MAIN too
    recs = _trained(cfg, {0.1: MAIN})
    first = cfg.runs_of("pi", 0.1)[0]
    recs[first.key] = {"status": "failed"}  # the seed-0 run left no spec; the seed-1 run trained MAIN
    assert main_e_range(cfg, ROOT, records=recs) == MAIN


def _recipe_default():
    """The ``e_range`` the recipe trains with when its config sets none: its typed config's own default."""
    return list(with_own_defaults(RecipeConfig, {})["e_range"])


def test_a_trained_recipe_config_without_e_range_gives_the_recipes_default(tmp_path):
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe.pop("e_range")
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    cfg = _cfg(recipe=tmp_path / "recipe.yaml", method_range=None)
    got = main_e_range(cfg, ROOT, records=_trained(cfg, {0.0: "unset", 0.1: "unset"}))
    assert got is not None and list(got) == _recipe_default()


def test_a_recipe_config_without_e_range_gives_the_recipes_default(tmp_path):
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe.pop("e_range")
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    cfg = _cfg(recipe=tmp_path / "recipe.yaml", method_range=None)
    got = main_e_range(cfg, ROOT)
    assert got is not None and list(got) == _recipe_default()
