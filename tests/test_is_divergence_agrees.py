"""is_divergence(x) is 'divergence_fn takes x' (its docstring): the reference is divergence_fn itself, for names,
dotted paths and values of other types a YAML or --metadata gives (a nested list, a mapping, a number)."""

import pytest

from torchtune_longshort.loss.divergences import divergence_fn, is_divergence


def _takes(name):
    try:
        divergence_fn(name)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", ["sce", "js", "kl", "torch.nn.functional.kl_div_nope", ["sce"], {"sce": 1}, 5, None])
def test_is_divergence_says_what_divergence_fn_takes(name):
    assert is_divergence(name) is _takes(name)


def test_mis_divergences_naming_a_list_inside_the_list_is_refused_not_a_type_error():
    from torchtune_longshort.eval.tasks.common.divergence_names import divergence_names

    assert divergence_names([["sce"], "js"]) is None
    assert divergence_names(["sce", "js"]) == ["sce", "js"]
