"""A command of the study's plan estimated at exactly ``budget_s`` fits it: the README refuses a command estimated
*over* ``budget_s``. Hand mutation testing (mutants21) found ``total >= budget_s`` passing test_study_plan. The
reference is the README's closed form, start + base evaluation + ceil(fine-tunes / jobs) x (train + eval)."""

from __future__ import annotations

import math

import pytest

from torchtune_longshort.config.fields import build_section
from torchtune_longshort.study.plan import PlanConfig

KEYS = ["base", "pi_a0_s0", "pi_a0.1_s0", "yarn_a0_s0"]
PARTS = {"start_s": 60, "base_eval_s": 70, "train_s": 110, "eval_s": 100}


def _at(budget: float) -> PlanConfig:
    return build_section(PlanConfig, {"budget_s": budget, "parts": PARTS, "commands": [KEYS]}, "plan")


def test_a_command_estimated_at_exactly_the_budget_is_accepted_and_one_second_less_refused():
    exact = 60 + 70 + math.ceil(3 / 2) * (110 + 100)  # 550 s, the README's arithmetic
    _at(exact).check_with(KEYS, jobs=2)
    with pytest.raises(ValueError, match=rf"= {exact} s, over budget_s={exact - 1}: split it"):
        _at(exact - 1).check_with(KEYS, jobs=2)


@pytest.mark.parametrize("k", [0, -1])
def test_command_numbers_are_1_based_so_0_and_negatives_are_refused(k):
    # mutants21: `0 <= k` passed test_study_plan, and --command 0 ran the last command (a Python index of -1)
    plan = build_section(PlanConfig, {"budget_s": 999, "parts": PARTS, "commands": [KEYS[:2], KEYS[2:]]}, "plan")
    assert plan.command(1) == KEYS[:2]
    with pytest.raises(ValueError, match=rf"^--command {k}: the plan has commands 1..2$"):
        plan.command(k)
