"""The pip user's product: the wheel built from this checkout, installed where no path into the checkout is
importable (``tests/wheel_env.py``: a new venv that sees the suite venv's third-party packages but not its editable
finder), and the README's commands run with it from a folder outside the checkout, offline:

- the main job: ``longshort-cp`` a shipped config, then ``tune run`` the recipe for 2 steps;
- ``longshort-validate`` on a config with a typo, refused in one line (a device this machine lacks, under every
  entry point: tests/test_device_rule.py);
- ``longshort-eval run`` (our ``longshort`` model) and stock ``lm_eval --include_path "$(longshort-eval tasks-path)"``
  (``hf``) on that checkpoint, then ``longshort-eval-report``;
- ``longshort-misalignment``; the synthetic experiments' quick run;
- a copied study config with ``--quick``, one grid member failing on purpose (recorded with its error while the rest
  runs; exit 1, its last line naming the failures' logs), then rerun (everything that was ok is skipped).

With the hand-written package list this project had (commit a9bdd50), the wheel lacked
``torchtune_longshort.training.recipe_config`` and the main job failed on import. (Several minutes: slow.)
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from wheel_env import ROOT, build_wheel_env, source_files

META = '{"ppl_source":"stdlib","ppl_num_samples":2,"max_seq_lengths":"128"}'


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    env = build_wheel_env(tmp_path_factory.mktemp("wheel"))
    yield env
    env.stop()


def _ok(p, what: str):
    assert p.returncode == 0, f"{what} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-4000:]}"
    return p


def _one_line_refusal(p, prog: str) -> str:
    """The refusal a user sees: exit 2, one line on stderr from ``prog``, no traceback."""
    lines = [x for x in p.stderr.splitlines() if x.strip() and "Skipping import of cpp extensions" not in x]
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(lines) == 1, p.stderr[-3000:]
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0]


@pytest.mark.slow
def test_the_wheel_holds_every_source_file_and_only_it_is_imported(wheel):
    """Every module and data file under the package and configs/ is in the wheel, and the venv imports the
    package (a subpackage at depth 1 included) from the wheel, never from the checkout."""
    names = set(zipfile.ZipFile(wheel.wheel).namelist())
    for rel in source_files():
        # every tracked file, whatever its kind: a new data file type, or a folder find_packages skips, fails here
        if rel.startswith("torchtune_longshort/"):
            assert rel in names, rel
        elif rel.startswith("configs/"):
            assert "torchtune_longshort/" + rel in names, rel
    p = _ok(wheel.run(["python", "-c", "import sys, torchtune_longshort.study, torchtune_longshort.training."
                       "recipe_config as r; print(r.__file__); print(sys.meta_path)"], fresh=True),
            "import")
    site = wheel.venv.resolve()
    assert Path(p.stdout.splitlines()[0]).resolve().is_relative_to(site), p.stdout
    assert "__editable__" not in p.stdout and str(ROOT) not in p.stdout
    assert json.loads(zipfile.ZipFile(wheel.wheel).read("torchtune_longshort/_build_commit.json")) == {
        "git_commit": wheel.commit, "git_dirty": False}  # built from a clone: its commit recorded


@pytest.mark.slow
def test_a_wheel_built_from_the_sdist_ships_what_the_checkouts_wheel_ships_and_its_commit(wheel, tmp_path):
    """``pip install torchtune_longshort-*.tar.gz``: the sdist of a clone, unpacked and built by pip where there is
    no git checkout, gives the wheel the clone gives, the clone's commit included (setup.py's sdist writes it into
    the release tree; a wheel built from an sdist recorded no commit before)."""
    src = wheel.wheel.parent.parent / "src"  # the clone the fixture's wheel was built from
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "sdist")], cwd=src, check=True,
                   capture_output=True, text=True)
    sdist = next((tmp_path / "sdist").glob("torchtune_longshort-*.tar.gz"))
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps",
                    "--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path / "dist"), str(sdist)],
                   check=True, capture_output=True, text=True, cwd=tmp_path)
    built = zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl")))
    payload = {n for n in built.namelist() if ".dist-info/" not in n}
    assert payload == {n for n in zipfile.ZipFile(wheel.wheel).namelist() if ".dist-info/" not in n}
    assert json.loads(built.read("torchtune_longshort/_build_commit.json")) == {
        "git_commit": wheel.commit, "git_dirty": False}


@pytest.fixture(scope="module")
def egg_info(tmp_path_factory):
    """``setup.py -q egg_info`` run once for the two tests that read it: (its --egg-base folder, its run)."""
    base = tmp_path_factory.mktemp("egg_info")
    p = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(base)], cwd=ROOT,
                       check=True, capture_output=True, text=True, env={**os.environ, "LONGSHORT_TEST_FRESH": "1"})
    return base, p  # LONGSHORT_TEST_FRESH: no zygote


def test_the_sdist_holds_the_package_and_configs_and_none_of_the_test_suite(egg_info):
    """``python -m build --sdist`` / ``setup.py sdist`` lists its members as setuptools' egg_info does (SOURCES.txt):
    every source file of the package and configs/, the files the build reads, and nothing of tests/, which the sdist
    carried in part (setuptools' default tests/test*.py, without conftest.py and the helpers they import: a suite
    that did not collect). Fast: egg_info alone, no sdist or wheel built."""
    base, _ = egg_info
    members = {m for m in (base / "torchtune_longshort.egg-info/SOURCES.txt").read_text().splitlines()
               if not m.startswith(str(base))}  # the egg-info files, written where --egg-base put them
    tracked = source_files()  # git ls-files, the reference
    assert not [m for m in members if m.startswith("tests/")], sorted(m for m in members if m.startswith("tests/"))[:5]
    assert {m.split("/")[0] for m in members} == {"LICENSE", "MANIFEST.in", "README.md", "pyproject.toml", "setup.py",
                                                 "torchtune_longshort", "configs"}, sorted(members)[:20]
    assert {rel for rel in tracked if rel.startswith(("torchtune_longshort/", "configs/"))} <= members
    assert members <= set(tracked)


def test_the_build_reads_pyproject_toml_without_a_deprecation(egg_info):
    """``license = { text = ... }`` made every build (pip install ., python -m build) print setuptools' boxed
    'SetuptoolsDeprecationWarning: `project.license` as a TOML table is deprecated ... By 2027-Feb-18, you need to
    update your project ... or your builds will no longer be supported'; the SPDX string it asks for is read
    silently (setuptools >= 77, which build-system requires). Fast: egg_info alone."""
    base, p = egg_info
    assert "Deprecat" not in p.stderr and "!!" not in p.stderr, p.stderr[-3000:]
    pkg_info = (base / "torchtune_longshort.egg-info/PKG-INFO").read_text()
    assert "\nLicense-Expression: BSD-3-Clause\n" in pkg_info  # the license still stated, as an SPDX expression
    assert "\nLicense-File: LICENSE\n" in pkg_info  # and its text shipped (the sdist and the wheel's licenses/)
    assert "BSD 3-Clause License" in (ROOT / "LICENSE").read_text()


def _copy_build_inputs(src: Path) -> Path:
    """The checkout's files the build reads (not docs/ or tests/) copied to ``src``."""
    for rel in source_files():
        if not rel.startswith(("torchtune_longshort/", "configs/")) and "/" in rel:
            continue
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes((ROOT / rel).read_bytes())
    return src


def test_the_wheels_tree_is_built_without_a_warning_of_a_configs_folder(tmp_path):
    """Each configs/ folder (configs/tiny, configs/study, ...) made setuptools print a boxed 'WARNING Package
    'torchtune_longshort.configs.tiny' is absent from the `packages` configuration ... Package would be ignored' at
    every build of the wheel, ten in all, while shipping it; setup.py now names each such folder a package. The built
    tree still holds every shipped config (git ls-files the reference). Fast: build_py alone, into a copy."""
    src = _copy_build_inputs(tmp_path / "src")
    p = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")], cwd=src,
                       check=True, capture_output=True, text=True, env={**os.environ, "LONGSHORT_TEST_FRESH": "1"})
    assert "absent from the `packages`" not in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]
    built = {str(f.relative_to(tmp_path / "lib")) for f in (tmp_path / "lib").rglob("*.yaml")}
    assert {"torchtune_longshort/" + rel for rel in source_files() if rel.startswith("configs/")
            and rel.endswith(".yaml")} <= built


def test_a_wheel_built_again_in_the_same_folder_ships_no_file_an_earlier_build_left(tmp_path):
    """setuptools copies the package into ``build/lib`` and zips that folder, so a module, task YAML or config removed
    (or renamed) since an earlier ``pip install .`` / ``pip wheel .`` in the same checkout was still shipped: a
    module the source no longer has, a task lm-eval still registered, a config ``longshort-cp --list`` still
    listed. The wheel holds the source's files only."""
    src = _copy_build_inputs(tmp_path / "src")
    stale = ["torchtune_longshort/zz_removed.py", "torchtune_longshort/eval/tasks/zz_gone/longshort_zz_gone.yaml",
             "torchtune_longshort/eval/tasks/zz_gone/__init__.py", "torchtune_longshort/configs/tiny/zz_old.yaml",
             "torchtune_longshort/_build_commit.json"]  # an earlier build's commit: this copy is no git checkout
    for rel in stale:  # what an earlier build of a tree that still held them left in build/lib
        (src / "build/lib" / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / "build/lib" / rel).write_text("task: longshort_zz_gone\n" if rel.endswith(".yaml") else "X = 1\n")
    # setuptools' bdist_wheel, which pip's build backend runs in the same folder, without pip's start (~half the time)
    subprocess.run([sys.executable, "setup.py", "-q", "bdist_wheel", "--dist-dir", str(tmp_path / "dist")], cwd=src,
                   check=True, capture_output=True, text=True, env={**os.environ, "LONGSHORT_TEST_FRESH": "1"})
    names = set(zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl"))).namelist())
    assert not [rel for rel in stale if rel in names], sorted(n for n in names if "zz" in n)
    assert "torchtune_longshort/configs/tiny/longshort_stdlib.yaml" in names
    assert "torchtune_longshort/eval/tasks/ppl/longshort_ppl.yaml" in names


@pytest.fixture(scope="module")
def main_job(wheel):
    """The README's main job from the wheel: copy the shipped config, train 2 steps."""
    _ok(wheel.run(["longshort-cp", "tiny/longshort_stdlib.yaml", "run.yaml"]), "longshort-cp")
    _ok(wheel.run(["tune", "run", "torchtune_longshort/recipes/longshort_finetune.py", "--config", "run.yaml",
                   "max_steps=2", "save_every_n_steps=2", "output_dir=out", "validation=null"]), "tune run")
    return wheel.work / "out" / "step_2"


@pytest.mark.slow
def test_main_job_runs_from_the_wheel_and_refuses_bad_input_in_one_line(wheel, main_job):
    out = main_job.parent
    assert (main_job / "config.json").is_file() and (out / "recipe_state" / "step_2.pt").is_file()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "latest", "logs", "metrics.jsonl", "recipe_state", "step_0", "step_2", "torchtune_config.yaml"]
    line = _one_line_refusal(wheel.run(["longshort-validate", "run.yaml", "max_step=3"]), "longshort-validate")
    assert "'max_step' (did you mean 'max_steps'?)" in line
    assert "OK" in _ok(wheel.run(["longshort-validate", "run.yaml", "output_dir=elsewhere"]), "validate").stdout


@pytest.mark.slow
def test_eval_lm_eval_and_report_from_the_wheel(wheel, main_job):
    step = main_job.relative_to(wheel.work)
    ours = _ok(wheel.run(["longshort-eval", "run", "--model", "longshort", "--model_args", f"checkpoint_dir={step}",
                          "--tasks", "longshort_ppl", "--metadata", META, "--output_path", "res/ours"]),
               "longshort-eval")
    assert "fatal: not a git repository" not in ours.stderr + ours.stdout  # lm-eval's git call, quiet outside git
    # the closing line names the results file lm-eval wrote (37b9e38f), a file there under the run's folder
    closing, named = ours.stdout.strip().splitlines()[-1].split("; results: ")
    assert closing == "[longshort-eval] 3 metrics scored, none unscored"
    assert (wheel.work / named).is_file() and Path(named).parts[:2] == ("res", "ours")
    # the pack's INFO line in lm-eval's console format, once (before: never printed; its warnings came bare)
    assert len(re.findall(r"(?m)^\S+ INFO     \[torchtune_longshort\.eval\.model\.args:\d+\] CPU: glibc keeps",
                          ours.stderr)) == 1, ours.stderr
    from lm_eval.utils import sanitize_model_name

    results = next((wheel.work / "res/ours").rglob("results_*.json"))
    assert results.parent.name == sanitize_model_name(str(step))  # checkpoint_dir= names the folder as hf's does
    assert results == wheel.work / named
    # stock lm-eval, the README's command as written; the hf model cannot run the misalignment task: NaN, with why
    _ok(wheel.shell(f"lm_eval run --model hf --model_args pretrained={step},dtype=float32 --device cpu "
                         f"--include_path \"$(longshort-eval tasks-path)\" --tasks longshort_ppl,longshort_misalignment "
                         f"--metadata '{META}' --output_path res/hf"), "lm_eval")
    res_hf = json.loads(next((wheel.work / "res/hf").rglob("results_*.json")).read_text())
    assert math.isnan(res_hf["results"]["longshort_misalignment"]["sce_128,none"])
    reason = next(iter(res_hf["configs"]["longshort_misalignment"]["not_scored"]))
    assert "needs --model longshort" in reason and "this run uses --model hf" in reason, reason
    res_ours = json.loads(results.read_text())
    assert res_ours["config"]["device"] == "cpu" == res_ours["config"]["provenance"]["device"]["type"]
    a, b = res_ours["results"]["longshort_ppl"]["ppl_128,none"], res_hf["results"]["longshort_ppl"]["ppl_128,none"]
    assert a == pytest.approx(b, rel=1e-4), (a, b)
    _ok(wheel.run(["longshort-eval-report", "res/hf", "res/ours", "--labels", "hf,ours", "--out", "report"]), "report")
    md = (wheel.work / "report" / "report.md").read_text()
    # ours by the folder longshort-eval resolved and recorded (found from any folder); stock lm-eval's as typed
    assert f"| `ours` | res/ours | longshort | {(wheel.work / step).resolve()} | float32 | cpu | all |" in md, md[:2000]
    assert "| `hf` | res/hf | hf |" in md and "| float32 | cpu | all |" in md
    assert "longshort_misalignment" in md and "needs --model longshort" in md


@pytest.mark.slow
def test_misalignment_and_synthetic_from_the_wheel(wheel, main_job):
    step = main_job.relative_to(wheel.work)
    p = _ok(wheel.run(["longshort-misalignment", "--checkpoint-dir", str(step), "--length", "128",
                       "--num-samples", "4", "--output", "mis.json"]), "longshort-misalignment")
    res = json.loads((wheel.work / "mis.json").read_text())
    assert res["length"] == 128 and len(res["values"]["sce"]) == 4 and "95% CI" in p.stdout
    _ok(wheel.run(["python", "-m", "torchtune_longshort.synthetic", "--task", "mean", "--quick", "--steps", "5",
                   "--dim", "8", "--heads", "2", "--out", "syn"]), "synthetic")
    assert list((wheel.work / "syn").rglob("*.json"))


@pytest.mark.slow
def test_quick_study_from_the_wheel_with_a_failing_run(wheel):
    """The study's quick variant end to end, for real, from the wheel and a copied config: pre-training, fine-tunes
    through ``tune run``, lm-eval through the task pack, the report; a grid member whose recipe fails (its
    checkpointer.model_type does not convert the base's family: the study's own checks cannot see that, the recipe
    refuses it at start) is recorded with its error while the rest of the grid runs, and the study exits 1, its last
    line naming the failures' logs. A second invocation skips everything that was ok."""
    _ok(wheel.run(["longshort-cp", "study/cpu_small.yaml", "study.yaml"]), "longshort-cp")
    cfg = wheel.work / "study.yaml"
    raw = yaml.safe_load(cfg.read_text())
    assert raw["recipe"] == "torchtune_longshort/recipes/longshort_finetune.py"
    assert raw["recipe_config"] == "tiny/longshort_stdlib.yaml"  # by package: no path into a checkout
    raw["quick"]["methods"] = {"pi": {"method": "linear"},
                               "bad": {"method": "linear", "overrides": {"checkpointer": {"model_type": "MISTRAL"}}}}
    # one alpha, the baseline 0 the study asks for (0.3 beside it cost ~10 s more and checked nothing more: the
    # grid's alpha reaches the recipe in place of the config's 0.1 all the same): the grid runs bad (methods in the
    # YAML's sorted order; refused at start), then pi after it; two failures in the last line: tests/test_study_exit.py
    raw["quick"]["alphas"] = [0]
    cfg.write_text(yaml.safe_dump(raw))
    cmd = ["python", "-m", "torchtune_longshort.study", "--config", "study.yaml", "--quick", "--out", "sout",
           "--report-dir", "srep"]
    p = wheel.run(cmd, timeout=1500, fresh="self")  # its own output as printed from its start; its runs forked
    out, rep = wheel.work / "sout", wheel.work / "srep"
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("[study] 1 of 3 runs failed (bad_a0_s0); logs: ") and "train.log" in last
    summary = json.loads((rep / "summary.json").read_text())
    runs = summary["runs"]
    assert {k: r["status"] for k, r in runs.items()} == {"base": "ok", "pi_a0_s0": "ok", "bad_a0_s0": "failed"}
    assert "MISTRAL" in runs["bad_a0_s0"]["error"]
    md = (rep / "report.md").read_text()
    assert "| bad_a0_s0 | failed |" in md and "MISTRAL" in md
    ppl = summary["tables"]["ppl"]["methods"]["pi"]  # lm-eval numbers reached the tables, at every ppl length
    assert all(c["mean"] is not None and c["mean"] > 1 for row in ppl for c in row["cells"].values())
    # BABILong scored: the quick 1k rows fit its 1024-token model, and only the QA task asked (qa1) ran
    bab = summary["tables"]["babilong"]["methods"]["pi"]
    assert all(c["mean"] is not None for row in bab for c in row["cells"].values()), bab
    assert "data file not found" not in md and "may not be cut" not in md
    rec = json.loads((rep / "runs/pi_a0_s0/result.json").read_text())
    assert rec["spec"]["recipe_config"]["loss"]["alpha"] == 0
    assert rec["results"]["longshort_ppl"]["ppl_512"] == ppl[-1]["cells"]["512"]["mean"]
    assert rec["curves"]  # per-position curves came back from lm-eval's samples
    printed = (p.stdout + p.stderr).replace("\r", "\n")  # its own lines and its bar, no upstream warning lines
    assert not [x for x in printed.splitlines() if "warn" in x.lower()], printed[-3000:]
    assert "study runs: 100%" in printed and "3/3" in printed
    assert rec["provenance"]["stdlib_corpus"] == summary["provenance"]["stdlib_corpus"]
    # the wheel's build commit (its checkout is gone): the clone it was built from, not the repository its
    # site-packages may lie in
    assert rec["provenance"]["project"] == {**rec["provenance"]["project"], "git_commit": wheel.commit,
                                            "git_dirty": False}
    # lm-eval's output carries none of the filtered noise (torchao's at import: tests/test_quiet.py, fresh processes;
    # this run's were forked from a zygote that had imported it)
    eval_log = (out / "runs/pi_a0_s0/eval.log").read_text()
    for noise in ("Custom kwargs can be passed", "not scored on the same number", "overrides existing task",
                  "metric 'missing_data,none' is missing", "fatal: not a git"):
        assert noise not in eval_log, noise
    assert "Saving final epoch checkpoint" not in (out / "runs/pi_a0_s0/train.log").read_text()

    p2 = wheel.run(cmd, timeout=900)  # every ok run is skipped; only the failing one is tried again
    assert p2.returncode == 1
    assert p2.stdout.count("result.json present (ok), skipped") == 2
    assert p2.stdout.count("FAILED at train") == 1
