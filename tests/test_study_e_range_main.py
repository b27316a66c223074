"""Table 7's ranges against the main grid's own: a range that resolves at L to the range the main grid's run of its
method and alpha already trains (with nothing else different) trained that run again under a variant name, and the
claims compared it with itself; the study config refuses it before anything is written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.study import StudyConfigError, load_study_config
from torchtune_longshort.windows import resolve_e_range

ROOT = Path(__file__).resolve().parents[1]


def _study(tmp_path, ranges, main=None):
    raw = yaml.safe_load((ROOT / "configs/study/cpu_small.yaml").read_text())  # L = 256
    raw.pop("quick")
    raw.update(methods={"pi": {"method": "linear"}}, alphas=[0, 0.1], seeds=[0])  # few runs: a fast check
    raw["finetune"]["overrides"].pop("e_range")  # the main grid's range: the recipe config's, or recipe_overrides'
    if main is not None:
        raw["recipe_overrides"]["e_range"] = main
    raw["variants"] = {"e_range": {"method": "pi", "alpha": 0.1, "ranges": ranges}}
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


@pytest.mark.parametrize("main", [None, [1, "L/4"]])
def test_a_range_that_is_the_main_grids_own_is_refused(tmp_path, main):
    L = 256
    recipe = yaml.safe_load((ROOT / "configs/tiny/longshort_stdlib.yaml").read_text())
    own = resolve_e_range(main or recipe["e_range"], L)
    for r in ([1, 64], [1, 128]):
        path = _study(tmp_path, [r], main)
        if resolve_e_range(r, L) == own:
            with pytest.raises(StudyConfigError, match=re.escape(
                    f"variants.e_range.ranges has {r!r}, U[{own[0]}, {own[1]}] at L={L}, the e_range ")
                    + r".* of the main grid's run pi_a0\.1: leave it out: "
                    + r"Table 7 compares against the main grid's run$"):
                load_study_config(path, repo_root=ROOT)
        else:
            load_study_config(path, repo_root=ROOT)


def test_the_main_range_at_another_alpha_is_a_comparison_of_its_own(tmp_path):
    # no main-grid run at alpha 0.2: the variant's [1, L/2] run is not a copy of any
    path = _study(tmp_path, [[1, "L/2"]])
    raw = yaml.safe_load(path.read_text())
    raw["variants"]["e_range"]["alpha"] = 0.2
    path.write_text(yaml.safe_dump(raw))
    load_study_config(path, repo_root=ROOT)
