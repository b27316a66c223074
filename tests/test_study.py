"""Study runner: config checks, the grid, recipe configs, skip / resume / failure records, and the report's tables
against the result.json files they link to (parsed back independently).

The grid logic runs against a fake executor that plays the recipe and lm-eval (writes step_<k> folders,
metrics.jsonl and a results_*.json with values made from alpha, seed and length), so this file needs no training;
tests/test_study_quick.py runs the real thing (slow).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
import re
import shutil
import statistics
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.study import Study, StudyConfigError, length_label, load_study_config
from torchtune_longshort.study.report import build_report
from plot_helpers import assert_png_drawn

ROOT = Path(__file__).resolve().parents[1]
CPU_SMALL = ROOT / "configs/study/cpu_small.yaml"


def _write_cfg(tmp_path, **changes):
    raw = yaml.safe_load(CPU_SMALL.read_text())
    for k, v in changes.items():
        raw[k] = v
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def _label(n: int) -> str:
    """The task pack's length label, written out here (1024 -> "1k") as the independent reference."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _value(task: str, alpha: float, seed: int, metadata: dict) -> dict:
    """The fake lm-eval's numbers: a known function of task, length, alpha and seed, one metric per length of
    the task's own lengths key in --metadata."""
    lengths = {"longshort_ppl": "ppl", "longshort_misalignment": "mis", "longshort_passkey": "passkey"}
    out = {}
    for n in metadata.get(f"{lengths.get(task, '-')}_max_seq_lengths", []):
        lab = _label(n)
        if task == "longshort_ppl":
            out.update({f"ppl_{lab},none": 10.0 + n / 100 - 2 * alpha + 0.37 * seed, f"ppl_{lab}_stderr,none": 0.1})
        if task == "longshort_misalignment":
            out.update({f"sce_{lab},none": 5.0 - alpha + 0.11 * seed + n / 1000,
                        f"jeffreys_{lab},none": 0.5 - alpha / 2 + 0.01 * seed, f"js_{lab},none": 0.01})
        if task == "longshort_passkey":
            out.update({"acc,none": 0.5 * seed, f"acc_{lab},none": 0.5 * seed, f"acc_{lab}_d0,none": 0.0,
                        f"digits_{lab},none": 0.1 + 0.3 * seed,
                        **{f"digits_{lab}_d{d},none": d / 100 for d in (0, 25, 50, 75, 100)}})
    if out:
        return out
    if task == "longshort_babilong":
        return {"acc,none": 0.2 + alpha, "acc_1k,none": 0.1 * seed, **{f"acc_1k_d{d},none": d / 200 for d in (0, 50, 100)}}
    raise AssertionError(task)


class FakeExecutor:
    """Plays ``tune run`` and ``python -m torchtune_longshort.eval run``; ``fail`` = run keys whose training fails."""

    def __init__(self, fail=()):
        self.fail, self.calls = set(fail), []

    def __call__(self, argv, log_path, cwd, env, timeout):
        argv = list(argv)
        self.calls.append(argv)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if Path(argv[0]).name == "tune":
            rc = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())
            out = Path(rc["output_dir"])
            key = out.parent.name
            if key in self.fail:
                log_path.write_text("step 3\nTraceback (most recent call last):\nFloatingPointError: non-finite loss nan at step 3\n")
                return 1
            if "overwrite_output_dir=True" in argv and out.exists():
                shutil.rmtree(out)  # as the recipe does with a folder it made
            d = out / f"step_{rc['max_steps']}"
            d.mkdir(parents=True)
            (d / "config.json").write_text("{}")
            a = rc["loss"]["alpha"]
            rows = [{"step": s, "loss": 3.0, "ce": 3.0 - 0.01 * s, "misalignment": 4.0 - a, "tokens_per_second": 1.0}
                    for s in range(1, rc["max_steps"] + 1)]
            rows += [{"step": s, "val_ce": 4.0 - 0.01 * s} for s in range(5, rc["max_steps"] + 1, 5)]  # validation
            (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
            log_path.write_text("ok\n")
            return 0
        if argv[1:3] == ["-m", "torchtune_longshort.eval.tasks.babilong.generator"]:
            Path(argv[argv.index("--out") + 1]).mkdir(parents=True, exist_ok=True)
            return 0
        assert argv[1:4] == ["-m", "torchtune_longshort.eval", "run"], argv
        margs = dict(kv.split("=", 1) for kv in argv[argv.index("--model_args") + 1].split(","))
        run_dir = Path(margs["pretrained"]).parents[1]
        rc = yaml.safe_load((run_dir / "recipe.yaml").read_text())
        alpha, seed = rc["loss"]["alpha"], rc["seed"]
        out = Path(argv[argv.index("--output_path") + 1]) / "model"
        out.mkdir(parents=True, exist_ok=True)
        tasks = argv[argv.index("--tasks") + 1].split(",")
        metadata = json.loads(argv[argv.index("--metadata") + 1])
        (out / "results_2026-01-01T00-00-00.json").write_text(
            json.dumps({"results": {t: _value(t, alpha, seed, metadata) for t in tasks}}))
        return 0


def _study(tmp_path, fail=(), **cfg_changes):
    cfg = load_study_config(_write_cfg(tmp_path, **cfg_changes), repo_root=ROOT)
    ex = FakeExecutor(fail)
    return Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=ex, log=lambda m: None), ex


# ---------------------------------------------------------------- config
def test_shipped_configs_load_and_grid_sizes():
    full = load_study_config(CPU_SMALL, repo_root=ROOT)
    quick = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
    assert (full.L0, full.L) == (128, 256)
    assert len(full.grid) == 3 * 3 * 2 and {r.method for r in full.grid} == {"pi", "yarn", "clex"}
    assert len(quick.grid) == 2 and {r.method for r in quick.grid} == {"clex"}  # quick's methods replace
    keys = [r.key for r in full.grid]
    assert len(set(keys)) == len(keys) and "yarn_a0.1_s1" in keys
    medium = load_study_config(ROOT / "configs/study/cpu_medium.yaml", repo_root=ROOT)
    runs = medium.grid  # 3 methods x 4 alphas + 3 e ranges + 2 divergences x 2 alphas + equal compute, x 3 seeds
    assert len(runs) == (3 * 4 + 3 + 4 + 1) * 3 and len({r.key for r in runs}) == len(runs)
    assert {r.variant for r in runs} == {None, "e_range", "divergence", "equal_compute"}
    assert medium.base.min_ppl_ratio == 2.0 and (medium.L0, medium.L) == (128, 512)
    mq = load_study_config(ROOT / "configs/study/cpu_medium.yaml", quick=True, repo_root=ROOT)
    assert [r.key for r in mq.grid] == ["pi_a0_s0", "pi_a0.1_s0", "pi_a0.1_e1-L_4_s0", "pi_a0.1_js_s0",
                                            "pi_a0.1_eqc_s0"]  # quick's variants replace the full ones
    for name in ("gpu_medium.yaml", "llama2_7b_clex.yaml"):
        if (ROOT / "configs/study" / name).is_file():
            cfg = load_study_config(ROOT / "configs/study" / name, repo_root=ROOT)
            assert cfg.alphas[0] == 0.0


@pytest.mark.parametrize("change, needle", [
    ({"L": 128}, "L=128 must be greater than L0=128"),
    ({"alphas": [0.1, 0.3]}, "must include 0"),
    ({"alphas": [0, -1]}, "alphas=[0, -1]"),
    ({"methods": {"pi": {"factor": 2}}}, "methods.pi"),
    ({"eval": {"passkey_lengths": [0]}}, "eval.passkey_lengths[]=0 is not accepted: expected a token count >= 1"),
    ({"recipe_config": "configs/nope.yaml"}, "recipe_config='configs/nope.yaml' is neither a file (relative to "),
    ({"recipe_config": "tiny/nope.yaml"}, "nor a config this package ships: name one of `longshort-cp --list`"),
    ({"recipe": "nope/recipe.py"}, "recipe='nope/recipe.py': `tune run` would import it as module 'nope.recipe', "
                                   "which is not importable"),
    # the checkout's thin entry point: `tune run` would import torchtune's own top-level `recipes` package
    ({"recipe": "recipes/longshort_finetune.py"}, "module 'recipes.longshort_finetune', which is not importable"),
    ({"not_a_torchtune_config": {"_component_": "torch.nn.Linear"}}, "not_a_torchtune_config="),
])
def test_bad_config_names_field_and_value(tmp_path, change, needle):
    with pytest.raises(StudyConfigError, match=re.escape(needle)):
        load_study_config(_write_cfg(tmp_path, **change), repo_root=ROOT)


def test_shipped_configs_resolve_from_any_folder(tmp_path):
    """A shipped study config names its recipe and recipe config by package (the recipe as `tune run` imports it,
    the config as `longshort-cp` names it), so it loads with another working folder than the checkout."""
    from torchtune_longshort.configs_cli import config_path

    cfg = load_study_config(ROOT / "configs/study/cpu_small.yaml", repo_root=tmp_path)
    assert cfg.recipe_config == "tiny/longshort_stdlib.yaml"
    assert cfg.recipe_config_file(tmp_path) == config_path("tiny/longshort_stdlib.yaml")
    mine = tmp_path / "mine.yaml"  # a file path still wins over a shipped name
    mine.write_text((ROOT / "configs/tiny/longshort_stdlib.yaml").read_text())
    assert load_study_config(_write_cfg(tmp_path, recipe_config="mine.yaml"), repo_root=tmp_path
                             ).recipe_config_file(tmp_path) == mine


def test_length_labels_match_task_pack():
    assert [length_label(n) for n in (128, 512, 1024, 8192)] == ["128", "512", "1k", "8k"]


def test_recipe_configs_base_and_finetune(tmp_path):
    study, _ = _study(tmp_path)
    base = study.recipe_config("base")
    assert base["model"]["_component_"] == "torchtune.models.llama2.llama2" and base["model"]["max_seq_len"] == 128
    assert base["seq_len"] == 128 and base["loss"]["alpha"] == 0.0 and base["checkpointer"]["checkpoint_dir"] is None
    run = next(r for r in study.cfg.grid if r.key == "yarn_a0.3_s1")
    ft = study.recipe_config(run.key, run)
    assert ft["model"]["_component_"] == "torchtune_longshort.models.rope_scaled"
    assert (ft["model"]["method"], ft["model"]["max_seq_len"], ft["model"]["model"]["max_seq_len"]) == ("yarn", 256, 128)
    assert ft["seq_len"] == 256 and ft["loss"]["alpha"] == 0.3 and ft["seed"] == 1
    assert ft["checkpointer"]["checkpoint_dir"] == str(study.base_checkpoint())
    assert ft["output_dir"] == str(study.run_dir("yarn_a0.3_s1") / "train")
    assert ft["tokenizer"]["path"] == str(study.tokenizer_dir())


# ---------------------------------------------------------------- grid behaviour
def test_a_method_s_own_overrides_reach_its_runs_only(tmp_path):
    study, _ = _study(tmp_path, methods={"pi": {"method": "linear"},
                                         "clex": {"method": "clex", "t_min": 2,
                                                  "overrides": {"clip_rope_separately": True}}})
    runs = {r.key: r for r in study.cfg.grid}
    clex = study.recipe_config("clex_a0.1_s0", runs["clex_a0.1_s0"])
    pi = study.recipe_config("pi_a0.1_s0", runs["pi_a0.1_s0"])
    assert clex["clip_rope_separately"] is True and "clip_rope_separately" not in pi
    assert clex["model"]["t_min"] == 2 and "overrides" not in clex["model"]  # the rope kwargs, less the recipe keys
    assert runs["clex_a0.1_s0"].rope == {"method": "clex", "t_min": 2}
    with pytest.raises(StudyConfigError, match=r"methods\.clex\.overrides=\[1\] must map recipe keys"):
        _study(tmp_path, methods={"clex": {"method": "clex", "overrides": [1]}})


def test_failed_run_recorded_and_grid_goes_on_then_skip_on_rerun(tmp_path):
    study, ex = _study(tmp_path, fail={"pi_a0.3_s1"})
    recs = study.run()
    assert recs["pi_a0.3_s1"]["status"] == "failed" and recs["pi_a0.3_s1"]["stage"] == "train"
    assert "FloatingPointError: non-finite loss nan" in recs["pi_a0.3_s1"]["error"]
    ok = [k for k, r in recs.items() if r["status"] == "ok"]
    assert len(ok) == 18  # base + 17 of 18 fine-tunes (3 methods x 3 alphas x 2 seeds)
    summary = build_report(study.out, tmp_path / "report", study.cfg)
    md = (tmp_path / "report" / "report.md").read_text()
    assert re.search(r"\| pi_a0\.3_s1 \| failed \|.*FloatingPointError: non-finite loss nan", md)
    assert summary["runs"]["pi_a0.3_s1"]["status"] == "failed"
    # per checkpoint: entropy = (SCE - Jeffreys) / 2 of the fake lm-eval's values at L (alpha 0.3, seed 0)
    L = study.cfg.L
    row = next(x for x in md.splitlines() if x.startswith("| pi_a0.3_s0 | ok |"))
    entropy = float(row.split("|")[5])
    assert math.isclose(entropy, ((5.0 - 0.3 + L / 1000) - (0.5 - 0.3 / 2)) / 2, rel_tol=1e-3)
    wall = md[md.index("## Wall time"):]
    assert "- fine-tunes: 17 ok," in wall and "1 fine-tune(s) at once" in wall  # the failed run is not averaged

    # Second invocation: the ok runs are skipped (no subprocess), the failed one is tried again and now passes.
    ex2 = FakeExecutor()
    study.executor = ex2
    recs2 = study.run()
    trained = [Path(a[a.index("--config") + 1]).parent.name for a in ex2.calls if Path(a[0]).name == "tune"]
    assert trained == ["pi_a0.3_s1"]
    assert all(r["status"] == "ok" for r in recs2.values())


def test_interrupted_training_resumes_and_finished_training_is_not_redone(tmp_path):
    study, ex = _study(tmp_path)
    study.run_one("base", None, evaluate=False)
    run = study.cfg.grid[0]
    train = study.run_dir(run.key) / "train"
    (train / "step_10").mkdir(parents=True)  # an interrupted run left a checkpoint
    study.run_one(run.key, run)
    tune_calls = [a for a in ex.calls if Path(a[0]).name == "tune"]
    assert tune_calls[-1][-1] == "resume=True" and f"runs/{run.key}" in tune_calls[-1][4]
    # eval interrupted after training: result.json gone, step_<max> present -> only lm-eval runs
    (study.run_dir(run.key) / "result.json").unlink()
    n = len(ex.calls)
    assert study.run_one(run.key, run)["status"] == "ok"
    assert len(ex.calls) == n  # eval results were complete too: nothing re-run


def test_a_changed_config_trains_and_evaluates_again_and_only_what_it_changes(tmp_path):
    study, ex = _study(tmp_path)
    study.run_one("base", None, evaluate=False)
    run = study.cfg.grid[0]
    eval_dir = study.run_dir(run.key) / "eval"

    def calls_of(rec_fn):
        n = len(ex.calls)
        rec = rec_fn()
        calls = [a for a in ex.calls[n:] if "torchtune_longshort.eval.tasks.babilong.generator" not in a]  # data, once
        return rec, ["tune" if Path(a[0]).name == "tune" else "eval" for a in calls], calls

    rec, kinds, _ = calls_of(lambda: study.run_one(run.key, run))
    assert rec["status"] == "ok" and kinds == ["tune", "eval"]
    (eval_dir / "model" / "stale_marker").write_text("from the first evaluation")

    # a fine-tune setting changed: result.json, checkpoint and eval results are all of the old config
    ft = study.cfg.finetune
    study.cfg = replace(study.cfg, finetune=replace(ft, overrides={**ft.overrides, "optimizer": {"lr": 5.0e-4}}))
    rec, kinds, calls = calls_of(lambda: study.run_one(run.key, run))
    assert rec["status"] == "ok" and kinds == ["tune", "eval"]
    assert calls[0][-1] == "overwrite_output_dir=True"  # from step 0, not skipped, not resumed
    assert not (eval_dir / "model" / "stale_marker").exists()
    assert rec["spec"]["recipe_config"]["optimizer"]["lr"] == 5.0e-4

    # an eval setting changed: the checkpoint is reused, lm-eval runs again with the new metadata
    study.cfg = replace(study.cfg, eval=replace(study.cfg.eval, ppl_num_samples=5))
    rec, kinds, calls = calls_of(lambda: study.run_one(run.key, run))
    assert kinds == ["eval"] and json.loads(calls[0][calls[0].index("--metadata") + 1])["ppl_num_samples"] == 5

    # eval interrupted after lm-eval wrote its results (result.json lost): nothing runs again
    (study.run_dir(run.key) / "result.json").unlink()
    rec, kinds, _ = calls_of(lambda: study.run_one(run.key, run))
    assert rec["status"] == "ok" and kinds == []


def test_base_failure_blocks_finetunes_with_reason(tmp_path):
    study, _ = _study(tmp_path, fail={"base"})
    recs = study.run()
    assert recs["base"]["status"] == "failed"
    assert all(r["status"] == "failed" and "base model unavailable" in r["error"] for k, r in recs.items() if k != "base")


# ---------------------------------------------------------------- report against its sources
def _parse_tables(md: str):
    """Markdown tables -> list of (heading path, header, rows), parsed without the report's code."""
    out, heads, lines = [], [], md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            heads = heads[: level - 1] + [line.lstrip("# ").strip()]
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in line.strip("|").split(" | ")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("| "):
                rows.append([c.strip() for c in lines[i].strip()[2:-2].split(" | ")])
                i += 1
            out.append((list(heads), header, rows))
            continue
        i += 1
    return out


def test_report_tables_equal_the_json_they_link_to(tmp_path):
    study, _ = _study(tmp_path, fail={"yarn_a0.1_s0"})
    study.run()
    rdir = tmp_path / "report"
    build_report(study.out, rdir, study.cfg)
    md = (rdir / "report.md").read_text()
    metric_of = {"Perplexity": ("longshort_ppl", "ppl"), "Misalignment metric, Eq. 4 (SCE": ("longshort_misalignment", "sce"),
                 "Misalignment metric, Eq. 4, Jeffreys": ("longshort_misalignment", "jeffreys"), "Passkey retrieval": ("longshort_passkey", "acc"),
                 "Passkey digits": ("longshort_passkey", "digits")}
    checked, families = 0, set()
    for heads, header, rows in _parse_tables(md):
        fam = next((v for k, v in metric_of.items() if heads and heads[1].startswith(k)), None) if len(heads) > 1 else None
        if fam is None:
            continue
        families.add(fam)
        assert header[0] == "loss" and header[-1] == "runs"
        assert rows[0][0] == "CE (alpha = 0)"  # baseline row first
        for row in rows:
            links = re.findall(r"\]\((runs/[^)]+/result\.json)\)", row[-1])
            recs = [json.loads((rdir / l).read_text()) for l in links]
            recs = [r for r in recs if r["status"] == "ok"]
            for col, text in zip(header[1:-1], row[1:-1]):
                vals = [r["results"][fam[0]][f"{fam[1]}_{col}"] for r in recs]
                if not vals:
                    assert text == "—"
                    continue
                parts = text.split(" ± ")
                assert math.isclose(float(parts[0]), statistics.fmean(vals), rel_tol=1e-3), (heads, row, col)
                if len(vals) > 1:
                    assert math.isclose(float(parts[1]), statistics.stdev(vals), rel_tol=1e-3, abs_tol=1e-9)
                else:
                    assert len(parts) == 1
                checked += 1
    # 5 tables x 2 methods x 3 alpha rows x their columns, + base reference rows
    assert checked > 80 and families == set(metric_of.values())
    # the failed run is not in its row's numbers: yarn alpha 0.1 has one seed -> no ±
    assert re.search(r"\| CE \+ 0\.1 x misalignment \| [0-9.]+ \| [0-9.]+ \|", md)
    # every run's raw JSON and lm-eval file sit in the report folder
    for r in study.cfg.grid:
        assert (rdir / "runs" / r.key / "result.json").is_file()
    assert (rdir / "runs" / "pi_a0_s0" / "lm_eval_results.json").is_file()
    for png in ("ppl_vs_length.png", "misalignment_vs_length.png", "babilong_depth_length.png",
                "passkey_depth_length.png", "finetune_convergence.png"):
        assert_png_drawn(rdir / png)


def test_provenance_in_every_file_the_study_writes(tmp_path):
    import torch

    study, _ = _study(tmp_path)
    study.run(only=["pi_a0_s0"])
    rec = json.loads((study.run_dir("pi_a0_s0") / "result.json").read_text())
    assert rec["provenance"]["packages"]["torch"] == torch.__version__
    # cpu_small trains and evaluates on the stdlib corpus: its content hash is recorded
    assert len(rec["provenance"]["stdlib_corpus"]["sha256"]) == 64
    assert json.loads((study.out / "study.json").read_text())["provenance"] == rec["provenance"]
    summary = build_report(study.out, tmp_path / "report", study.cfg)
    assert summary["provenance"]["stdlib_corpus"] == rec["provenance"]["stdlib_corpus"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Provenance" in md and f"torch {torch.__version__}" in md
    assert rec["provenance"]["stdlib_corpus"]["sha256"][:16] in md


def test_outcome_is_paired_by_seed(tmp_path):
    study, _ = _study(tmp_path)
    study.run()
    s = build_report(study.out, tmp_path / "report", study.cfg)
    # fake: sce = 5 - alpha + 0.11 seed + n/1000 -> paired difference exactly -alpha, sd 0, both seeds lower
    d = s["outcome"]["misalignment"]["pi"]["0.3"]["256"]
    assert math.isclose(d["mean_diff"], -0.3, abs_tol=1e-9) and d["sd_diff"] < 1e-9 and (d["n_lower"], d["n_pairs"]) == (2, 2)
    p = s["outcome"]["ppl"]["yarn"]["0.1"]["1k"]
    assert math.isclose(p["mean_diff"], -0.2, abs_tol=1e-9)


class PartialBabilongExecutor(FakeExecutor):
    """Like FakeExecutor, and lm-eval's group bookkeeping for longshort_babilong: only ``with_data`` of its five QA
    tasks report scores, the others only missing_data (as when the generator made fewer QA tasks)."""

    def __init__(self, with_data):
        super().__init__()
        self.with_data = with_data

    def __call__(self, argv, log_path, cwd, env, timeout):
        rc = super().__call__(argv, log_path, cwd, env, timeout)
        if argv[1:4] == ["-m", "torchtune_longshort.eval", "run"]:
            f = next((Path(argv[argv.index("--output_path") + 1]) / "model").glob("results_*.json"))
            data = json.loads(f.read_text())
            qas = [f"longshort_babilong_qa{i}" for i in range(1, 6)]
            for t in qas:
                data["results"][t] = ({"acc,none": 0.5, "acc_1k,none": 0.5} if t in self.with_data
                                      else {"missing_data,none": 1.0})
            data["group_subtasks"] = {"longshort_babilong": qas}
            f.write_text(json.dumps(data))
        return rc


@pytest.mark.parametrize("qa, with_data, heading, mark", [
    ("qa1", ["longshort_babilong_qa1"], "## BABILong QA1 accuracy", " (1/5 tasks)"),
    ("qa1,qa2,qa3,qa4,qa5", [f"longshort_babilong_qa{i}" for i in range(1, 6)], "## BABILong QA1-QA5 accuracy", None),
])
def test_babilong_heading_says_what_was_run_and_partial_scores_are_marked(tmp_path, qa, with_data, heading, mark):
    raw = yaml.safe_load(CPU_SMALL.read_text())
    raw["eval"]["babilong"]["qa"] = qa
    raw["methods"], raw["seeds"] = {"pi": {"method": "linear"}}, [0]
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(raw))
    cfg = load_study_config(p, repo_root=ROOT)
    study = Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=PartialBabilongExecutor(with_data),
                  log=lambda m: None)
    study.run()
    rec = json.loads((study.run_dir("pi_a0_s0") / "result.json").read_text())
    cov = rec["coverage"]["longshort_babilong"]["acc"]
    assert cov["present"] == with_data and cov["total"] == 5
    summary = build_report(study.out, tmp_path / "report", cfg)
    md = (tmp_path / "report" / "report.md").read_text()
    assert heading in md
    assert "not comparable with published BABILong results" in md
    section = md.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| CE")]
    assert rows
    cell = summary["tables"]["babilong"]["methods"]["pi"][0]["cells"]["all"]
    if mark:
        assert all(mark in row for row in rows)
        assert cell["partial_group"]["missing"] == ["longshort_babilong_qa2", "longshort_babilong_qa3", "longshort_babilong_qa4", "longshort_babilong_qa5"]
        assert "no value from longshort_babilong_qa2, longshort_babilong_qa3, longshort_babilong_qa4, longshort_babilong_qa5" in section
    else:
        assert "tasks)" not in " ".join(rows) and "partial_group" not in cell


def test_jobs_run_fine_tunes_at_once_with_their_share_of_threads(tmp_path, monkeypatch):
    """``jobs: 2``: two fine-tunes are in flight together (a 2-party barrier in the fake recipe would time out if
    they ran one after the other), each subprocess gets cpu_count // 2 threads, the base runs alone with the
    caller's environment, BABILong data is generated once, a failed run does not stop the others, and the
    records come back in grid order."""
    import threading

    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    barrier, seen = threading.Barrier(2, timeout=20), []

    class Parallel(FakeExecutor):
        def __call__(self, argv, log_path, cwd, env, timeout):
            if Path(argv[0]).name == "tune":
                key = Path(argv[argv.index("--config") + 1]).parent.name
                seen.append((key, env.get("OMP_NUM_THREADS")))
                if len([k for k, _ in seen if k != "base"]) <= 2 and key != "base":
                    barrier.wait()  # the first two fine-tunes must meet here
            return super().__call__(argv, log_path, cwd, env, timeout)

    cfg = load_study_config(_write_cfg(tmp_path, jobs=2), repo_root=ROOT)
    assert cfg.jobs == 2
    ex = Parallel(fail={"yarn_a0_s0"})
    study = Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=ex, log=lambda m: None)
    recs = study.run()
    assert list(recs) == ["base"] + [r.key for r in cfg.grid]
    assert recs["yarn_a0_s0"]["status"] == "failed"
    assert sum(r["status"] == "ok" for r in recs.values()) == len(recs) - 1
    assert dict(seen)["base"] is None and {t for k, t in seen if k != "base"} == {"4"}
    gens = [a for a in ex.calls if a[1:3] == ["-m", "torchtune_longshort.eval.tasks.babilong.generator"]]
    assert len(gens) == 1
    assert "OMP_NUM_THREADS" not in study.env  # the parallel environment does not outlive the grid


def test_jobs_must_be_a_positive_integer(tmp_path):
    with pytest.raises(StudyConfigError, match=r"jobs"):
        load_study_config(_write_cfg(tmp_path, jobs=0), repo_root=ROOT)
