"""The runs :func:`build_grid` expands a study to, checked against the grid written out by hand from its docstring
and the module's: seed outermost, then every method x alpha (``<method>_a<alpha:g>_s<seed>``), then each variant's
runs on its method (``pi_a0.1_e1-L_4_s0``, ``pi_a0.1_eqc_s0``, ``pi_a0.3_js_s0``). An e range up to ``L`` (the
paper's setting (4)), written ``L`` or as the number (``[1, 64]`` at ``L = 64`` kept the listing floor) compares the
whole overlap (``loss.min_context: none``), checked with the windows' own ``resolve_e_range``; recipe keys: the
method's ``overrides``, then the variant's over them."""

from __future__ import annotations

import itertools

import pytest

from torchtune_longshort.study.grid import (DivergenceVariant, EqualComputeVariant, ERangeVariant, MethodSpec,
                                            Variants, build_grid)
from torchtune_longshort.windows import resolve_e_range

L = 64
RANGES = [[1, "L/4"], [1, "L"], ["L/4", "L/2"], ["L/2", "L"], [1, 64], [1, 63]]


def _grid():
    pi_keys = {"lr": 1e-4, "e_range": [1, "L/2"], "loss": {"chunk": 2}}  # a variant's e_range goes over its own
    methods = {"pi": MethodSpec("linear", {"factor": 2.0}, pi_keys),
               "yarn": MethodSpec("yarn", {})}
    variants = Variants(e_range=ERangeVariant(method="pi", alpha=0.1, ranges=RANGES),
                        divergence=DivergenceVariant(method="pi", alphas=[0.3], divergences=["js"]),
                        equal_compute=EqualComputeVariant(method="pi", alpha=0.1, overhead=1.0526))
    return build_grid(methods, [0.0, 0.1, 1.0], [0, 7], variants, L)


def test_seed_outermost_then_methods_by_alphas_then_the_variants():
    expected = []
    for s in (0, 7):
        expected += [f"{m}_a{a}_s{s}" for m, a in itertools.product(("pi", "yarn"), ("0", "0.1", "1"))]
        expected += [f"pi_a0.1_e{lo}-{hi}_s{s}" for lo, hi in (("1", "L_4"), ("1", "L"), ("L_4", "L_2"), ("L_2", "L"),
                                                                  ("1", "64"), ("1", "63"))]
        expected += [f"pi_a0.3_js_s{s}", f"pi_a0.1_eqc_s{s}"]
    runs = _grid()
    assert [r.key for r in runs] == expected
    assert all(r.key == f"{r.config}_s{r.seed}" for r in runs)


def test_a_range_up_to_L_compares_the_whole_overlap_and_the_others_keep_the_floor():
    e_runs = [r for r in _grid() if r.variant == "e_range" and r.seed == 0]
    assert [r.overrides["e_range"] for r in e_runs] == RANGES
    for r in e_runs:
        up_to_L = resolve_e_range(r.overrides["e_range"], L)[1] == L
        assert (r.overrides.get("loss", {}).get("min_context") == "none") == up_to_L, r.key


def test_a_variants_recipe_keys_go_over_its_methods_own():
    runs = {r.key: r for r in _grid()}
    assert runs["pi_a0.1_s0"].overrides == {"lr": 1e-4, "e_range": [1, "L/2"], "loss": {"chunk": 2}}
    assert runs["yarn_a0.1_s0"].overrides == {}
    assert runs["pi_a0.3_js_s0"].overrides == {"lr": 1e-4, "e_range": [1, "L/2"],
                                               "loss": {"chunk": 2, "divergence": "js"}}
    assert runs["pi_a0.1_e1-L_s0"].overrides == {"lr": 1e-4, "loss": {"chunk": 2, "min_context": "none"},
                                                  "e_range": [1, "L"]}
    assert runs["pi_a0.1_eqc_s7"].overrides == {"lr": 1e-4, "e_range": [1, "L/2"], "loss": {"chunk": 2},
                                                "equal_compute_overhead": 1.0526}
    assert runs["pi_a0.1_eqc_s7"].alpha == 0.1 and runs["pi_a0.1_eqc_s7"].rope == {"method": "linear", "factor": 2.0}


def test_one_range_written_twice_is_refused_by_what_it_resolves_to():
    # [1, L] and [1, 64] at L = 64 trained the same runs twice under two names (e1-L, e1-64), and [1, L/4] given
    # twice named one run twice; a pair is refused exactly when the windows' resolve_e_range gives both one range
    for a, b in itertools.combinations(RANGES + [["1", "L / 4"], [1, "1*L"]], 2):
        variant = ERangeVariant(method="pi", alpha=0.1, ranges=[a, b])
        if resolve_e_range(a, L) == resolve_e_range(b, L):
            with pytest.raises(ValueError, match=r"^variants\.e_range\.ranges has .* give each range once$") as e:
                variant.check_with("variants.e_range", L)
            assert f"{a!r} and {b!r}" in str(e.value)
        else:
            variant.check_with("variants.e_range", L)
