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
        if abs(on_white / on_black - 1) < 2e-3:  # a near tie (the module rounds the crossing L=0.17913 to 0.179)
            continue
        assert text_colour((*rgb, 1.0)) == ("w" if on_white > on_black else "k"), rgb


def test_a_group_listed_inside_its_own_subgroup_is_counted_once_not_forever():
    results = {"g": {"acc": 0.5}, "t": {"acc": 0.5}}
    cov = group_coverage(results, {"g": ["h", "t"], "h": ["g", "u"]})
    assert "t" in cov["g"]["acc"]["present"] and "u" in cov["g"]["acc"]["missing"]
