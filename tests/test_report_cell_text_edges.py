"""Hand mutants of eval/report/figures.text_colour and group_coverage.group_coverage that survived test_plots_eval
and test_eval_report (mutants14).

References: WCAG 2.0's relative luminance and contrast ratio written out from the definition (each cell's word is
the colour of the higher contrast), and a group listing that names itself through a subgroup."""

import itertools

from torchtune_longshort.eval.report.figures import text_colour
from torchtune_longshort.eval.report.group_coverage import group_coverage


def _luminance(rgb):
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def test_cell_text_takes_the_colour_of_higher_wcag_contrast():
    steps = [i / 20 for i in range(21)]
    for rgb in itertools.product(steps, repeat=3):
        lum = _luminance(rgb)
        on_white, on_black = 1.05 / (lum + 0.05), (lum + 0.05) / 0.05
        if abs(on_white / on_black - 1) < 1e-9:  # a tie to rounding (the nearest on this grid is 1.3e-6 off one)
            continue
        assert text_colour((*rgb, 1.0)) == ("w" if on_white > on_black else "k"), rgb


def test_cell_text_just_either_side_of_the_exact_crossing():
    # WCAG 2.0: (L + 0.05) / 0.05 == 1.05 / (L + 0.05) at L = sqrt(1.05 * 0.05) - 0.05 = 0.179129, not 0.179
    for rgb in [(0.2, 0.45, 0.85), (0.2, 0.5, 0.55), (0.8, 0.1, 0.8), (0.75, 0.3, 0.5)]:
        lum = _luminance(rgb)
        assert abs(lum - 0.17913) < 3e-4, rgb
        assert text_colour((*rgb, 1.0)) == ("w" if 1.05 / (lum + 0.05) > (lum + 0.05) / 0.05 else "k"), rgb


def test_a_group_listed_inside_its_own_subgroup_is_counted_once_not_forever():
    results = {"g": {"acc": 0.5}, "t": {"acc": 0.5}}
    cov = group_coverage(results, {"g": ["h", "t"], "h": ["g", "u"]})
    assert "t" in cov["g"]["acc"]["present"] and "u" in cov["g"]["acc"]["missing"]
