"""Equal-compute step counts reproduce the paper's Appendix F pairs (50/100/200 -> 47/95/190 at 5.3% overhead)."""

import pytest

from torchtune_longshort.training.equal_compute import equal_compute_steps


@pytest.mark.parametrize("base,want", [(50, 47), (100, 95), (200, 190)])
def test_paper_appendix_f_pairs(base, want):
    assert equal_compute_steps(base, 200 / 190) == want


def test_bad_overhead():
    with pytest.raises(ValueError, match="equal_compute_overhead"):
        equal_compute_steps(200, 0.9)
    with pytest.raises(ValueError, match="max_steps"):
        equal_compute_steps(0, 1.05)


@pytest.mark.parametrize("alpha", [None, 0.0, 0.3])
def test_recipe_equal_compute_uses_the_alpha_it_trains_with(alpha, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """A config without ``loss.alpha`` trains with the loss's default (0.1, > 0), so Appendix F's equal compute must
    shorten it like any regularized run; an explicit ``alpha = 0`` is the CE baseline and keeps its steps."""
    from omegaconf import open_dict
    from recipe_config import make_cfg
    from torchtune import config

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=200,
                   equal_compute_overhead=200 / 190)
    with open_dict(cfg):
        if alpha is None:
            del cfg.loss["alpha"]
        else:
            cfg.loss.alpha = alpha
    recipe = LongShortFinetuneRecipe(cfg)
    trained_alpha = config.instantiate(recipe.config.loss.node()).alpha
    assert trained_alpha == recipe.config.loss.alpha == (0.1 if alpha is None else alpha)
    assert recipe.max_steps == (190 if trained_alpha > 0 else 200)  # the paper's 200 -> 190 pair
