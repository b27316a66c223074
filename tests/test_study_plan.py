"""The study's ``plan`` (:mod:`torchtune_longshort.study.plan`): each command's time is the closed form of its parts,
a plan that misses, invents or repeats a run is refused naming the keys, and one whose command would run past the
budget is refused with the arithmetic."""

from __future__ import annotations

import math

import pytest

from torchtune_longshort.study.plan import PlanConfig
from torchtune_longshort.config.fields import build_section

KEYS = ["base"] + [f"{m}_a{a}_s{s}" for s in (0, 1) for m in ("pi", "yarn") for a in (0, 0.1)]
PARTS = {"start_s": 60, "base_eval_s": 70, "train_s": 110, "eval_s": 100}


def _plan(commands, budget=540, parts=PARTS) -> PlanConfig:
    return build_section(PlanConfig, {"budget_s": budget, "parts": parts, "commands": commands}, "plan")


@pytest.mark.parametrize("keys, jobs", [(["base", "pi_a0_s0"], 3), (KEYS[1:], 3), (KEYS[1:4], 2), (["base"], 3)])
def test_the_estimate_is_start_plus_base_plus_waves_of_train_and_eval(keys, jobs):
    fine = [k for k in keys if k != "base"]
    expected = 60 + (70 if "base" in keys else 0) + math.ceil(len(fine) / jobs) * (110 + 100)
    total, line = _plan([keys]).estimate(keys, jobs)
    assert total == expected and line.endswith(f"= {expected:g} s")


def test_a_plan_that_covers_the_grid_within_budget_is_accepted():
    plan = _plan([KEYS[:4], KEYS[4:7], KEYS[7:]])
    plan.check_with(KEYS, jobs=3)
    assert plan.command(2) == KEYS[4:7]
    assert plan.table(3, "study/gpu_smollm2.yaml").count("--command") == 3


@pytest.mark.parametrize("commands, words", [
    ([KEYS[:4], KEYS[4:7]], ["in no command: yarn_a0_s1, yarn_a0.1_s1"]),
    ([KEYS[:4], KEYS[3:]], ["named twice: yarn_a0_s0"]),
    ([KEYS[:4], KEYS[4:7], KEYS[7:] + ["clex_a0_s0"]], ["not runs of this grid: clex_a0_s0"]),
])
def test_a_plan_that_misses_repeats_or_invents_a_run_is_refused_naming_it(commands, words):
    with pytest.raises(ValueError) as e:
        _plan(commands).check_with(KEYS, jobs=3)
    msg = str(e.value)
    assert msg.startswith("plan.commands must name every run of the grid once") and "\n" not in msg
    assert all(w in msg for w in words), msg


def test_a_command_over_budget_is_refused_with_its_arithmetic():
    plan = _plan([KEYS[:1], KEYS[1:]])  # 8 fine-tunes, jobs 3: 3 waves
    with pytest.raises(ValueError) as e:
        plan.check_with(KEYS, jobs=3)
    assert str(e.value) == (
        "plan.commands[1] (command 2: " + ", ".join(KEYS[1:]) + ") is estimated at 60 start + 3 waves of up to 3 "
        "fine-tunes x (110 train + 100 evaluation) = 690 s, over budget_s=540: split it into smaller commands")


def test_a_command_number_outside_the_plan_is_refused():
    with pytest.raises(ValueError, match=r"--command 4: the plan has commands 1..3"):
        _plan([KEYS[:4], KEYS[4:7], KEYS[7:]]).command(4)


@pytest.mark.parametrize("node, where", [
    ({"budget_s": 0, "parts": PARTS, "commands": [["base"]]}, "budget_s"),
    ({"budget_s": 540, "parts": {**PARTS, "train_s": -1}, "commands": [["base"]]}, "train_s"),
    ({"budget_s": 540, "parts": PARTS, "commands": []}, "commands"),
    ({"budget_s": 540, "parts": PARTS, "commands": [["base", 3]]}, "commands[0]"),
])
def test_bad_plan_values_are_refused_naming_the_field(node, where):
    with pytest.raises(Exception) as e:
        build_section(PlanConfig, node, "plan")
    assert where in str(e.value)


# ---- the shipped plan and the CLI, as a user calls it (the config is loaded whole: its base, the real SmolLM2, is
# converted once and cached, ``real_model_dir``)
SEEDS = "study/gpu_smollm2_seeds.yaml"


def _study(argv, capsys):
    from torchtune_longshort.study.__main__ import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_shipped_plan_prints_three_commands_within_budget(capsys, tmp_path, monkeypatch):
    """Without fetching the config's pypi: base: before, --plan on a machine without the model downloaded and
    converted it (minutes, ~0.5 GB) to print a table."""
    import torchtune_longshort.models.gguf as gguf

    monkeypatch.setenv("LONGSHORT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf, "_fetch_and_convert", lambda *a, **k: pytest.fail("--plan fetched the base model"))
    rc, out, err = _study(["--config", SEEDS, "--plan", "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    assert not (tmp_path / "cache").exists()
    rows = [r for r in out.splitlines() if r.startswith("| ") and "--command" in r]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "2", "3"]
    estimates = [float(r.split("= ")[1].split(" s")[0]) for r in rows]
    assert estimates == [385, 260, 460] and max(estimates) <= 540  # the parts measured on an H200 (2026-12-04)
    assert not (tmp_path / "o").exists()
    rc, out, err = _study(["--config", SEEDS, "--report-only", "--out", str(tmp_path / "o")], capsys)  # no runs
    assert rc == 2 and "holds no study runs" in err and not (tmp_path / "cache").exists(), err


REFUSED = "python -m torchtune_longshort.study: error: "  # every entry point's one-line refusal (refusals.py)


@pytest.mark.parametrize("extra, words", [
    (["--command", "4"], REFUSED + "--command 4: the plan has commands 1..3"),
    (["--command", "1", "--only", "pi_a0_s0"], REFUSED + "--command and --only: give one"),
    (["--command", "1", "--quick"], REFUSED + "--command: --quick has no plan"),
])
def test_a_command_the_plan_cannot_answer_is_refused_before_anything_is_written(real_model_dir, capsys, tmp_path,
                                                                                extra, words):
    rc, out, err = _study(["--config", SEEDS, "--out", str(tmp_path / "o"), *extra], capsys)
    assert rc == 2 and err.strip().startswith(words) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_plan_on_a_config_without_one_names_what_a_plan_is_and_the_way_on():
    # `--plan` on study/cpu_small.yaml said only "--plan: the config has no plan"
    from types import SimpleNamespace

    from torchtune_longshort.study.__main__ import _selected

    with pytest.raises(ValueError) as info:
        _selected(SimpleNamespace(command=None, plan=True, only=None), SimpleNamespace(plan=None, quick=False))
    err = str(info.value)
    assert err.startswith("--plan: ") and "no plan section" in err and "gpu_smollm2_seeds.yaml has one" in err, err
    assert "--only" in err


def test_a_plan_over_its_budget_is_refused_at_load_with_the_arithmetic(real_model_dir, capsys, tmp_path):
    import yaml

    from torchtune_longshort.configs_cli import resolve_config

    raw = yaml.safe_load(resolve_config(SEEDS, tmp_path, "--config").read_text())
    raw["plan"]["budget_s"] = 450
    cfg = tmp_path / "s.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    rc, out, err = _study(["--config", str(cfg), "--command", "2", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.strip() == (
        REFUSED + "study config: plan.commands[2] (command 3: yarn_a0_s1, yarn_a0.1_s1, pi_a0_s2, pi_a0.1_s2, yarn_a0_s2, "
        "yarn_a0.1_s2) is estimated at 60 start + 2 waves of up to 3 fine-tunes x (105 train + 95 evaluation) = "
        "460 s, over budget_s=450: split it into smaller commands")
    assert not (tmp_path / "o").exists()


def test_plan_with_report_only_is_refused_naming_both(capsys, tmp_path, monkeypatch):
    # `--plan --report-only` printed the plan's training commands, exit 0, as if --report-only were not there
    import argparse

    import torchtune_longshort.models.gguf as gguf

    with pytest.raises(SystemExit) as usage:
        argparse.ArgumentParser().error("x")  # the reference: the status of a command-line usage error
    capsys.readouterr()
    monkeypatch.setenv("LONGSHORT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf, "_fetch_and_convert", lambda *a, **k: pytest.fail("fetched the base model"))
    for order in (["--plan", "--report-only"], ["--report-only", "--plan"]):
        rc, out, err = _study(["--config", SEEDS, *order, "--out", str(tmp_path / "o")], capsys)
        assert rc == usage.value.code and out == "" and err.count("\n") == 1, (rc, out, err)
        assert err.startswith(REFUSED + "--plan and --report-only: give one"), err
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing fetched
