"""Study runner: config checks, the grid, recipe configs, skip / resume / failure records, jobs (the report's tables
against the result.json files they link to, and a failed run recorded then tried again by the rerun:
test_study_report.py).

The grid logic runs against a fake executor (study_helpers.FakeExecutor) that plays the recipe and lm-eval, so this
file needs no training; tests/test_study_quick.py runs the real thing (slow).
"""

from __future__ import annotations

import json
from dataclasses import replace
import re
from pathlib import Path

import pytest

from torchtune_longshort.study import Study, StudyConfigError, length_label, load_study_config
from study_helpers import ROOT, CPU_SMALL, FakeExecutor, _study, _write_cfg


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
    # the study replaces its recipe config's model node: a method of that node's restates the settings a learned
    # RoPE was trained with there (llama2_7b_clex trained CLEX under act silu, its recipe config's under tanh)
    from omegaconf import OmegaConf

    from torchtune_longshort.rope import ROPE_METHODS

    clex = load_study_config(ROOT / "configs/study/llama2_7b_clex.yaml", repo_root=ROOT)
    node = OmegaConf.to_container(OmegaConf.load(clex.recipe_config_file(ROOT)))["model"]
    same = [r for r in clex.grid if r.rope["method"] == node["method"]]
    assert same and all(r.rope.get(k) == node[k] for r in same for k in ROPE_METHODS[node["method"]].learned_settings
                        if k in node)


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
    assert base["model"]["_component_"] == "torchtune_longshort.models.hf_decoder" and base["model"]["max_seq_len"] == 128
    assert base["seq_len"] == 128 and base["loss"]["alpha"] == 0.0 and base["checkpointer"]["checkpoint_dir"] is None
    run = next(r for r in study.cfg.grid if r.key == "yarn_a0.3_s1")
    ft = study.recipe_config(run.key, run)
    assert ft["model"]["_component_"] == "torchtune_longshort.models.rope_scaled"
    assert (ft["model"]["method"], ft["model"]["max_seq_len"], ft["model"]["model"]["max_seq_len"]) == ("yarn", 256, 128)
    assert ft["seq_len"] == 256 and ft["loss"]["alpha"] == 0.3 and ft["seed"] == 1
    assert ft["checkpointer"]["checkpoint_dir"] == str(study.base_checkpoint())
    assert ft["output_dir"] == str(study.run_dir("yarn_a0.3_s1") / "train")
    assert ft["tokenizer"]["path"] == str(study.tokenizer_dir())


def test_a_base_checkpoint_under_a_tilde_is_the_home_folders(tmp_path, monkeypatch):
    # `base.checkpoint_dir: ~/ckpt`: the config check read the home folder's, and every run's recipe config (and the
    # pre-flight) got <cwd>/~/ckpt, which does not exist
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    study, _ = _study(tmp_path, base={"checkpoint_dir": "~/ckpt"})
    run = study.cfg.grid[0]
    assert study.recipe_config(run.key, run)["checkpointer"]["checkpoint_dir"] == str(tmp_path / "ckpt")
    assert study.cfg.base.tokenizer == str(tmp_path / "ckpt")


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


def test_wall_time_names_a_stage_without_a_clock_and_no_overlap_of_one_job():
    # a quick study's base is not evaluated (eval_base: false): its line read "evaluation — s"; and one fine-tune at
    # a time was said to overlap ("runs in parallel overlap")
    from torchtune_longshort.study.report import _wall_markdown

    recs = {"base": {"status": "ok", "wall_s_train": 22.1, "wall_s_eval": None},
            "pi_a0_s0": {"status": "ok", "wall_s_train": 20.0, "wall_s_eval": 30.0, "wall_s": 50.0}}
    md = "\n".join(_wall_markdown(recs, 112.0, 1))
    assert "- base: training 22.1 s, no evaluation recorded (" in md and "— s" not in md
    assert md.count("sum to 0.8 min\n") == 1 and "parallel" not in md
    assert "sum to 0.8 min (runs in parallel overlap)" in "\n".join(_wall_markdown(recs, 112.0, 2))


def test_a_study_folder_moved_elsewhere_keeps_its_finished_runs(tmp_path, monkeypatch):
    # committed on one machine (a lent GPU) and cloned on the next: the records name their folders by place, not by
    # that machine's paths (before: every run's spec held its absolute output_dir, so each was trained again)
    monkeypatch.setenv("LONGSHORT_CACHE", str(tmp_path / "cache_a"))
    study, _ = _study(tmp_path, methods={"pi": {"method": "linear"}}, alphas=[0], seeds=[0])
    built, recipe_config = [], study.recipe_config
    monkeypatch.setattr(study, "recipe_config", lambda key, run=None: built.append(key) or recipe_config(key, run))
    assert all(r["status"] == "ok" for r in study.run().values())
    assert built == ["base", "pi_a0_s0"]  # each run's recipe config built once (its spec, recipe.yaml, steps: 3)
    rec = json.loads((study.run_dir("pi_a0_s0") / "result.json").read_text())
    assert rec["spec"]["recipe_config"]["output_dir"] == "<study>/runs/pi_a0_s0/train"
    assert rec["spec"]["recipe_config"]["checkpointer"]["checkpoint_dir"].startswith("<study>/base/train/step_")
    moved = tmp_path / "elsewhere" / "out"
    moved.parent.mkdir()
    study.out.rename(moved)
    monkeypatch.setenv("LONGSHORT_CACHE", str(tmp_path / "cache_b"))
    ex = FakeExecutor()
    again = Study(study.cfg, output_dir=moved, repo_root=ROOT, executor=ex, log=lambda m: None)
    assert all(r["status"] == "ok" for r in again.run().values()) and ex.calls == []
    # a record written before specs were portable (this machine's absolute paths) still counts where it lies
    old = {**rec, "spec": {**rec["spec"], "recipe_config": json.loads(json.dumps(
        rec["spec"]["recipe_config"]).replace('"<study>/', f'"{moved.resolve()}/'))}}
    assert old["spec"] != rec["spec"]
    (moved / "runs" / "pi_a0_s0" / "result.json").write_text(json.dumps(old))
    assert again.run_one("pi_a0_s0", again.cfg.grid[0]) == old and ex.calls == []
    # an eval-only change evaluates again and trains nothing: each run's recipe.yaml names the old folder (before:
    # "recipe.yaml changed ... training again from step 0" for the base and every fine-tune)
    lengths = list(study.cfg.eval.ppl_lengths)[:-1]
    edited = Study(replace(study.cfg, eval=replace(study.cfg.eval, ppl_lengths=lengths)), output_dir=moved,
                   repo_root=ROOT, executor=ex, log=lambda m: None)
    assert all(r["status"] == "ok" for r in edited.run().values())
    assert ex.calls and not [c for c in ex.calls if Path(c[0]).name == "tune"]
    # a recipe.yaml that no longer reads as YAML (a user's edit) is another config, not the same one
    now = (moved / "runs" / "pi_a0_s0" / "recipe.yaml").read_text()
    assert edited._same_recipe("pi_a0_s0", now, now) and not edited._same_recipe("pi_a0_s0", "output_dir: [", now)


def test_portable_names_a_path_by_the_longest_place_that_holds_it(tmp_path, monkeypatch):
    from torchtune_longshort.study.portable import places, portable, same_spec

    where = {"<study>": "/a/repo/outputs/s", "<model cache>": "/home/u/.cache/tl", "<repo>": "/a/repo"}
    spec = {"c": "/home/u/.cache/tl/smollm2", "o": ["/a/repo/outputs/s", "/a/repo/outputs/st/x", "/a/repo/configs"],
            "n": 3, "r": "relative/path", "other": "/elsewhere/x"}
    assert portable(spec, where) == {"c": "<model cache>/smollm2", "o": ["<study>", "<repo>/outputs/st/x",
                                     "<repo>/configs"], "n": 3, "r": "relative/path", "other": "/elsewhere/x"}
    assert same_spec(spec, portable(spec, where), where) and not same_spec(spec, {**spec, "n": 4}, where)
    monkeypatch.setenv("LONGSHORT_CACHE", str(tmp_path / "cache"))
    assert places(tmp_path / "out", ROOT)["<model cache>"] == str((tmp_path / "cache").resolve())


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
    old_results = eval_dir / "model" / "results_2025-12-31T23-59-59.123456.json"  # lm-eval's name for its results
    old_results.write_text((eval_dir / "model" / "results_2026-01-01T00-00-00.json").read_text())
    (eval_dir / "model" / "samples_longshort_ppl_2025-12-31T23-59-59.123456.jsonl").write_text("{}\n")
    (eval_dir / "notes.md").write_text("the user's")  # a file the study did not write: kept

    # a fine-tune setting changed: result.json, checkpoint and eval results are all of the old config
    ft = study.cfg.finetune
    study.cfg = replace(study.cfg, finetune=replace(ft, overrides={**ft.overrides, "optimizer": {"lr": 5.0e-4}}))
    rec, kinds, calls = calls_of(lambda: study.run_one(run.key, run))
    assert rec["status"] == "ok" and kinds == ["tune", "eval"]
    assert calls[0][-1] == "overwrite_output_dir=True"  # from step 0, not skipped, not resumed
    assert not old_results.exists() and sorted(p.name for p in (eval_dir / "model").iterdir()) == [
        "results_2026-01-01T00-00-00.json"]  # the new evaluation's only
    assert (eval_dir / "notes.md").read_text() == "the user's"
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


class _Killed(BaseException):
    """The study SIGKILLed: nothing after the stage's start runs."""


def test_a_retrain_killed_before_the_recipe_cleared_the_old_checkpoints_trains_again(tmp_path):
    study, ex = _study(tmp_path)
    study.run_one("base", None, evaluate=False)
    run = study.cfg.grid[0]
    assert study.run_one(run.key, run)["status"] == "ok"
    ft = study.cfg.finetune  # a fine-tune setting changed: the run trains again from step 0 ...
    study.cfg = replace(study.cfg, finetune=replace(ft, overrides={**ft.overrides, "optimizer": {"lr": 5.0e-4}}))

    def killed_while_tune_imports(argv, *a):
        if Path(argv[0]).name == "tune":
            raise _Killed  # ... and the study is killed before the recipe deleted the old step folders
        return ex(argv, *a)

    study.executor = killed_while_tune_imports
    with pytest.raises(_Killed):
        study.run_one(run.key, run)
    study.executor = ex  # the rerun: the old checkpoint (trained at the old lr) is not taken as the new one's
    n = len(ex.calls)
    rec = study.run_one(run.key, run)
    tune = [a for a in ex.calls[n:] if Path(a[0]).name == "tune"]
    assert rec["status"] == "ok" and len(tune) == 1 and tune[0][-1] == "overwrite_output_dir=True"
    assert study.run_one(run.key, run)["status"] == "ok" and len(ex.calls) == n + 2  # then finished: skipped
