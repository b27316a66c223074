"""A study never exits 0 after a failure: the four bad configs of the probe are refused (exit 2) before anything
trains, naming the field; a grid with a failing run exits 1 and its last line counts the failures and names their
logs. The grid runs against test_study.py's fake executor (no training)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CPU_SMALL = ROOT / "configs/study/cpu_small.yaml"


def _bad_alpha(raw):
    raw["alpha"] = raw.pop("alphas")


def _bad_eval_key(raw):
    raw["eval"]["ppl_num_sample"] = raw["eval"].pop("ppl_num_samples")


def _bad_method(raw):
    raw["methods"]["clex"]["method"] = "clexx"


def _bad_override(raw):
    raw["finetune"]["overrides"]["save_every_n_step"] = raw["finetune"]["overrides"].pop("save_every_n_steps")


@pytest.mark.parametrize("change,needles", [
    (_bad_alpha, ["'alpha' (did you mean 'alphas'?)"]),
    (_bad_eval_key, ["'eval.ppl_num_sample' (did you mean 'ppl_num_samples'?)"]),
    (_bad_method, ["methods.clex.method='clexx' is not a RoPE method (did you mean 'clex'?)"]),
    (_bad_override, ["finetune.overrides", "'save_every_n_step' (did you mean 'save_every_n_steps'?)"]),
], ids=["alpha", "ppl_num_sample", "clexx", "save_every_n_step"])
def test_bad_study_configs_exit_non_zero_before_any_training(tmp_path, change, needles):
    raw = yaml.safe_load(CPU_SMALL.read_text())
    change(raw)
    cfg = tmp_path / "study.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "torchtune_longshort.study", "--config", str(cfg), "--quick", "--out",
                        str(out), "--repo-root", str(ROOT)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    for needle in needles:
        assert needle in p.stderr, p.stderr[-2000:]
    assert not out.exists()  # nothing trained, nothing written


def test_a_study_with_a_failing_run_exits_non_zero(tmp_path, monkeypatch, capsys):
    from test_study import FakeExecutor

    import torchtune_longshort.study.__main__ as study_main
    import torchtune_longshort.study.runner as runner
    from torchtune_longshort.study.__main__ import main

    class FailingStudy(runner.Study):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "executor": FakeExecutor(fail={"clex_a0.3_s0"})})

    monkeypatch.setattr(study_main, "Study", FailingStudy)
    out = tmp_path / "out"
    rc = main(["--config", str(CPU_SMALL), "--quick", "--out", str(out), "--repo-root", str(ROOT)])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 1
    assert last.startswith("[study] 1 of ") and "runs failed (clex_a0.3_s0)" in last
    assert str(out / "runs" / "clex_a0.3_s0" / "train.log") in last


def test_an_out_that_is_a_file_and_a_bad_jobs_are_refused_in_one_line(tmp_path, capsys):
    # `--out run.yaml` (a file) ended in a FileExistsError traceback from mkdir; `--jobs 0` printed argparse's usage
    # above the error. Both now one line, exit 2, the file untouched.
    from torchtune_longshort.study.__main__ import main

    a_file = tmp_path / "run.yaml"
    a_file.write_text("mine\n")
    argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT)]
    assert main(argv + ["--out", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file, not a folder" in err and str(a_file) in err, err
    assert a_file.read_text() == "mine\n"
    with pytest.raises(SystemExit) as exit_info:
        main(argv + ["--out", str(tmp_path / "out"), "--jobs", "0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--jobs=0" in err, err
    assert not (tmp_path / "out").exists()


def test_a_report_dir_holding_a_users_report_is_refused_before_the_study_runs(tmp_path, capsys):
    # `--report-dir DIR` with the user's own DIR/report.md: the study's report overwrote it; now refused in one
    # line, exit 2, before anything runs. A folder of an earlier study report (its summary.json) is rewritten.
    from torchtune_longshort.study.__main__ import main

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my own\n")
    argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT), "--out", str(tmp_path / "out")]
    assert main(argv + ["--report-dir", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report.md" in err and str(mine) in err, err
    assert (mine / "report.md").read_text() == "my own\n" and not (tmp_path / "out").exists()
    (mine / "summary.json").write_text('{"tables": {}, "claims": {}}')  # an earlier study report's
    assert main(argv + ["--report-dir", str(mine), "--report-only"]) == 2  # an --out with no runs: nothing to report
    assert "holds no study runs (no base/ or runs/)" in capsys.readouterr().err
    (tmp_path / "out" / "base").mkdir(parents=True)
    assert main(argv + ["--report-dir", str(mine), "--report-only"]) == 1  # rewritten; 1: no run of the grid ran
    assert capsys.readouterr().out.strip().splitlines()[-1] == ("[study] none of the 3 runs finished: the report "
                                                               "holds no results")
    md = (mine / "report.md").read_text()  # a smoke run's report says so in its title and above its verdicts
    assert md.startswith("# Study `cpu_small` (quick variant: numbers mean nothing)\n")
    answer = md.split("## The answer: the paper's claims, one line each\n", 1)[1].split("| claim |")[0]
    assert "A `--quick` run: a smoke test of the pipeline" in answer and "mean nothing" in answer


def test_ctrl_c_stops_the_grid_and_a_rerun_goes_on(tmp_path, monkeypatch, capsys):
    """A fine-tune ended by SIGINT (the recipe saves and exits 130; Ctrl-C reaches the study and its subprocess
    alike) stops the grid: the run is recorded as interrupted (not failed), the runs after it do not start, no
    report is written, the study exits 130 with one line saying how to go on. Before, the run was recorded as
    failed and the grid went on. The same command then finishes the grid, the base skipped."""
    import json

    from test_study import FakeExecutor

    import torchtune_longshort.study.__main__ as study_main
    import torchtune_longshort.study.runner as runner
    from torchtune_longshort.study.stages import run_command

    class StoppedOnce(FakeExecutor):
        def __call__(self, argv, log_path, cwd, env, timeout):
            if Path(argv[0]).name == "tune" and "clex_a0_s0" in str(log_path) and not self.stopped:
                self.stopped = True  # a real subprocess that exits as the recipe does after a SIGINT
                return run_command([sys.executable, "-c", "raise SystemExit(130)"], log_path, cwd, env, timeout)
            return super().__call__(argv, log_path, cwd, env, timeout)

    stopper = StoppedOnce()
    stopper.stopped = False

    class Stopped(runner.Study):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "executor": stopper})

    args = ["--config", str(CPU_SMALL), "--quick", "--out", str(tmp_path / "out"), "--repo-root", str(ROOT), "--jobs",
            "1"]  # one run at a time: the second is not started when the first is stopped
    monkeypatch.setattr(study_main, "Study", Stopped)
    assert study_main.main(args) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("[study] interrupted (") and "Rerun the same command to go on" in err[-1]
    assert "the same command with --report-only writes one" in err[-1]
    runs = tmp_path / "out" / "runs"
    assert json.loads((runs / "clex_a0_s0" / "result.json").read_text())["status"] == "interrupted"
    assert not (runs / "clex_a0.3_s0").exists() and not (tmp_path / "out" / "report").exists()
    capsys.readouterr()
    # the report the line offers: the finished runs, the stopped one named as interrupted, not as failed (before:
    # "2 of 3 runs failed (clex_a0_s0, clex_a0.3_s0)", exit 1): the report asked for was written, nothing failed
    assert study_main.main(args + ["--report-only"]) == 0
    assert "interrupted" in (tmp_path / "out" / "report" / "report.md").read_text()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("[study] 2 of 3 runs not finished (interrupted: clex_a0_s0; not run: clex_a0.3_s0)")
    assert "failed" not in last and "without --report-only finishes them" in last
    assert study_main.main(args) == 0
    assert json.loads((runs / "clex_a0_s0" / "result.json").read_text())["status"] == "ok"
    assert "base: result.json present (ok), skipped" in capsys.readouterr().out


def test_a_failed_run_beside_an_interrupted_one_exits_1_naming_each_as_what_it_is(tmp_path, capsys):
    from types import SimpleNamespace

    from torchtune_longshort.study.__main__ import _outcome

    study = SimpleNamespace(out=tmp_path, run_dir=lambda k: tmp_path / "runs" / k)
    for k in ("b", "d"):
        (tmp_path / "runs" / k).mkdir(parents=True)
        (tmp_path / "runs" / k / "train.log").write_text("Traceback\n")
    runs = {"base": {"status": "ok"}, "a": {"status": "interrupted"}, "b": {"status": "failed"},
            "c": {"status": "not run"}, "d": {"status": "failed"}}
    assert _outcome(study, runs, None) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("[study] 2 of 5 runs not finished (interrupted: a; not run: c)")
    logs = " ".join(str(tmp_path / "runs" / k / "train.log") for k in ("b", "d"))
    assert lines[-1] == f"[study] 2 of 5 runs failed (b, d); logs: {logs}"  # each failure and its log named
    assert _outcome(study, runs, ["a"]) == 0  # --only a: b and c are not this command's


def test_the_study_writes_into_no_users_folder_and_refuses_an_unknown_run(tmp_path, capsys):
    """An --out holding a user's base/, runs/ or study.json was written over (recipe.yaml, result.json, study.json);
    `--only` with a key the grid lacks selected no run, silently. Both are refused in one line before anything runs;
    a folder a study made (its marker) is taken."""
    from torchtune_longshort.study.__main__ import main

    out = tmp_path / "out"
    (out / "base").mkdir(parents=True)
    (out / "base" / "result.json").write_text('{"mine": 1}')
    argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT)]
    cases = [(["--out", str(out)], "holds 'base', which no earlier run there wrote"),
             (["--out", str(tmp_path / "new"), "--only", "clex_a0_s9"],
              "--only: 'clex_a0_s9' is not a run of this study (did you mean"),
             # --only "$KEYS" with an empty variable trained the whole grid
             (["--out", str(tmp_path / "new"), "--only", " , "], "--only ' , ' names no run; give run keys")]
    for args, needle in cases:
        assert main(argv + args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
    assert (out / "base" / "result.json").read_text() == '{"mine": 1}' and sorted(os.listdir(tmp_path)) == ["out"]


def test_an_out_or_report_dir_that_cannot_be_made_is_refused_before_the_preflight(tmp_path, capsys, monkeypatch):
    # `--out` (or `--report-dir`) in a folder that takes no new folders ended in a PermissionError traceback, exit 1,
    # after the pre-flight had trained its tokenizer and read the data; now one line, exit 2, before it
    import torchtune_longshort.study.__main__ as study_main
    from torchtune_longshort.study.__main__ import main

    monkeypatch.setattr(study_main, "preflight", lambda *a, **k: pytest.fail("the pre-flight ran"))
    argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT)]
    for extra, needle in [(["--out", "/proc/longshort_x"], "--out (or the config's output_dir)='/proc/longshort_x' "
                                                           "cannot be created"),
                          (["--out", str(tmp_path / "out"), "--report-dir", "/proc/longshort_x"],
                           "--report-dir='/proc/longshort_x' cannot be created")]:
        assert main(argv + extra) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists()


def test_an_out_inside_the_base_checkpoint_is_refused(tmp_path):
    # every fine-tune refused its log folder inside the checkpoint it reads, after the study had written its folder
    from types import SimpleNamespace

    from torchtune_longshort.study.run_configs import check_outside_base

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    cfg = SimpleNamespace(base=SimpleNamespace(checkpoint_dir=str(ckpt)))
    with pytest.raises(ValueError, match=r"lies inside base.checkpoint_dir=.*name a folder outside it"):
        check_outside_base(ckpt / "study", cfg)
    check_outside_base(tmp_path / "study", cfg)  # beside it: fine
    check_outside_base(ckpt / "study", SimpleNamespace(base=SimpleNamespace(checkpoint_dir="pypi:smollm2")))


def test_an_out_inside_the_data_its_runs_read_is_refused_before_anything_is_written(tmp_path, capsys):
    # --out inside the local_text corpus of the recipe config: the study wrote its folder and trained its tokenizer
    # there, then the recipe refused every run (the base first) and the study reported them all failed, exit 1
    from torchtune_longshort.study.__main__ import main

    corpus = tmp_path / "corp"
    corpus.mkdir()
    (corpus / "a.txt").write_text("x = 1\n" * 2000)
    recipe = yaml.safe_load((ROOT / "configs/tiny/longshort_stdlib.yaml").read_text())
    recipe["dataset"] = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(corpus)}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    raw = yaml.safe_load(CPU_SMALL.read_text())
    raw["recipe_config"] = str(tmp_path / "recipe.yaml")
    raw["recipe_overrides"].pop("dataset")  # the stdlib's split: local_text takes none
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(raw))
    argv = ["--config", str(tmp_path / "study.yaml"), "--quick", "--repo-root", str(ROOT), "--out"]
    assert main([*argv, str(corpus / "study")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"lies inside dataset.path='{corpus}', which run base reads" in err, err
    assert [p.name for p in corpus.iterdir()] == ["a.txt"]


def test_ctrl_c_in_the_preflight_or_the_report_is_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C (a KeyboardInterrupt in the main thread, as Python raises it for SIGINT) during the pre-flight or while
    the report is written ended in a traceback; one line now, exit 130, saying what was kept and how to go on."""
    import torchtune_longshort.study.__main__ as study_main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    argv = ["--config", str(CPU_SMALL), "--quick", "--repo-root", str(ROOT), "--out", str(tmp_path / "out")]
    monkeypatch.setattr(study_main, "preflight", interrupted)
    assert study_main.main(argv) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted during the pre-flight: no run started" in err, err
    assert not (tmp_path / "out" / "runs").exists()
    monkeypatch.setattr(study_main, "build_report", interrupted)
    (tmp_path / "out" / "runs").mkdir(parents=True)  # a study's folder, its runs to report
    assert study_main.main(argv + ["--report-only"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted while writing the report" in err and "--report-only" in err, err


def test_a_fine_tune_stopped_alone_by_sigterm_exits_the_study_143(tmp_path, monkeypatch, capsys):
    """A scheduler that signals the fine-tune alone (SIGTERM to `tune`, which saves and exits 143): the study stopped
    its grid, as for Ctrl-C, but exited 130 whatever the signal; it exits 128 + the fine-tune's signal now."""
    from test_study import FakeExecutor

    import torchtune_longshort.study.__main__ as study_main
    import torchtune_longshort.study.runner as runner
    from torchtune_longshort.study.stages import run_command

    class StoppedBySigterm(FakeExecutor):
        def __call__(self, argv, log_path, cwd, env, timeout):
            if Path(argv[0]).name == "tune":  # a real subprocess that exits as the recipe does after a SIGTERM
                return run_command([sys.executable, "-c", "raise SystemExit(143)"], log_path, cwd, env, timeout)
            return super().__call__(argv, log_path, cwd, env, timeout)

    class Stopped(runner.Study):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "executor": StoppedBySigterm()})

    monkeypatch.setattr(study_main, "Study", Stopped)
    args = ["--config", str(CPU_SMALL), "--quick", "--out", str(tmp_path / "out"), "--repo-root", str(ROOT), "--jobs",
            "1"]
    assert study_main.main(args) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("[study] interrupted (") and "stopped by SIGTERM (exit 143)" in err[-1], err[-1]


def test_a_report_folder_or_the_other_variants_folder_is_refused_for_report_only(tmp_path, capsys):
    """``--report-only`` on a report folder (``docs/study/<name>``: report.md, summary.json, runs/ copies) reported
    the base as not run and advised a rerun that was then refused; on the folder of the ``--quick`` variant without
    ``--quick`` its runs were reported under the full config's steps, the rest as not run, exit 0. Both are refused
    in one line, exit 2, nothing written; the study's loader also takes a shipped config's name."""
    import json
    import shutil

    from torchtune_longshort.study.__main__ import main
    from torchtune_longshort.study.load import load_study_config

    argv = ["--config", str(CPU_SMALL), "--repo-root", str(ROOT), "--report-only"]
    report = tmp_path / "report_folder"
    shutil.copytree(ROOT / "docs/study/cpu_small_quick", report)
    before = sorted(p.name for p in report.iterdir())
    assert main(argv + ["--quick", "--out", str(report), "--report-dir", str(tmp_path / "r1")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a study's report folder (report.md, summary.json" in err, err
    assert sorted(p.name for p in report.iterdir()) == before and not (tmp_path / "r1").exists()
    quick = tmp_path / "quick_out"
    (quick / "base").mkdir(parents=True)
    (quick / "study.json").write_text(json.dumps({"name": "cpu_small", "quick": True, "config": {}, "runs": {}}))
    assert main(argv + ["--out", str(quick), "--report-dir", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds the study's --quick variant (study.json: quick=true): pass --quick" in err
    assert not (tmp_path / "r2").exists()
    assert load_study_config("study/cpu_small.yaml", repo_root=tmp_path).name == "cpu_small"


@pytest.mark.parametrize("module", ["torchtune_longshort.study.__main__", "torchtune_longshort.study.table1.__main__"])
def test_a_note_that_is_not_utf8_is_refused_before_anything_runs(module, tmp_path, capsys):
    # bytes the terminal could not decode (`--note $'\xff'`) reach Python as surrogates: the report's write failed
    # with "'utf-8' codec can't encode character '\udcff'", naming no option, after the whole grid had run
    import importlib

    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as e:
        main(["--config", str(CPU_SMALL), "--quick", "--out", str(tmp_path / "o"), "--note", "made on \udcff"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert "argument --note: not valid UTF-8 text" in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("where", ["out", "parent", "runs"])
def test_a_report_dir_that_is_the_studys_own_folder_is_refused_before_anything_runs(where, tmp_path, capsys):
    # `--report-dir` = `--out` was accepted: the report's copies went into the study's runs/, and a later report
    # (which clears what an earlier one wrote) deleted the study's own run records
    from torchtune_longshort.study.__main__ import main

    out = tmp_path / "s" / "out"
    rep = {"out": out, "parent": tmp_path / "s", "runs": out / "runs" / "rep"}[where]
    assert main(["--config", str(CPU_SMALL), "--quick", "--out", str(out), "--report-dir", str(rep)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "is the study's output folder" in err and "name another folder" in err, err
    assert not (tmp_path / "s").exists()


def test_a_bad_jobs_is_refused_with_plan_too(capsys):
    # `--plan --jobs 0` printed the plan and exited 0 (--plan returned before --jobs was read), while the same
    # --jobs 0 without --plan is refused: now refused in one line, exit 2 (argparse's status for a bad flag), no plan
    import argparse

    from torchtune_longshort.study.__main__ import main

    with pytest.raises(SystemExit) as argparse_exit:
        argparse.ArgumentParser().error("a bad flag")
    capsys.readouterr()

    argv = ["--config", str(ROOT / "configs/study/gpu_smollm2_seeds.yaml"), "--repo-root", str(ROOT), "--plan"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv + ["--jobs", "0"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == argparse_exit.value.code and out == "", out
    assert err.count("\n") == 1 and "--jobs=0: expected a positive integer" in err and "Traceback" not in err, err
