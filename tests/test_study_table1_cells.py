"""The Table-1 experiment's cells on a tiny checkpoint: bad input (a RoPE method, parameter or value the eval model
refuses, a length at or below L0, too few variants, fields the experiment sets itself) refused in one line before
anything is written; a failing cell recorded while the others run; Ctrl-C starting no further cell; a result of
another spec not read; a cached model's cells counted after the cache moves; a user's files in --out, the report
dir or a cell's eval folder kept. Split from test_study_table1.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
import yaml
from test_study_table1 import PROG, _rec


def _bad_method(raw):
    raw["variants"]["pi"]["method"] = "linearr"


def _short_length(raw):
    raw["lengths"] = [256, 384]


def _three_variants(raw):
    del raw["variants"]["yarn"]


def _max_length(raw):
    raw["eval"]["max_length"] = 512


def _original_length(raw):
    raw["variants"]["pi"]["original_max_seq_len"] = 128


def _list_value(raw):
    raw["variants"]["yarn"]["factor"] = [1, 2]


def _unknown_parameter(raw):
    raw["variants"]["yarn"]["factr"] = 2


def _bad_value(raw):
    raw["variants"]["ntk"]["factor"] = -1


@pytest.mark.parametrize("change,needle", [
    (_bad_method, "variants.pi.method='linearr' is not a RoPE method (did you mean 'linear'?)"),
    (_short_length, "lengths=[256, 384] must be non-empty, without repeats, and each > L0=256"),
    (_three_variants, "variants has 3 entries (['base', 'ntk', 'pi']): at least 4 are needed"),
    (_max_length, "eval.max_length=512: set per cell by this experiment"),
    (_original_length, "variants.pi.original_max_seq_len=128: set by this experiment (L0); remove it"),
    (_list_value, "variants.yarn.factor=[1, 2]: expected a number, true/false or a word"),
    (_unknown_parameter, "variants.yarn at length 384: the eval model refuses {'method': 'yarn', 'factr': 2"),
    (_bad_value, "variants.ntk at length 384: the eval model refuses {'method': 'ntk', 'factor': -1"),
], ids=["method", "length<=L0", "3_variants", "max_length", "original_max_seq_len", "list", "factr", "factor<0"])
def test_bad_input_is_refused_in_one_line_before_anything_is_written(tmp_path, tiny_folder, capsys, change, needle):
    from torchtune_longshort.study.table1.__main__ import main

    raw = _tiny_raw(tiny_folder)
    change(raw)
    cfg = tmp_path / "table1.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["--config", str(cfg), "--out", str(out), "--repo-root", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"{PROG}: error: table1 config: ") and needle in err, err
    assert not out.exists()


def _tiny_raw(folder):
    return {"name": "tiny", "checkpoint_dir": str(folder), "L0": 256, "lengths": [384],
            "variants": {"base": {"method": "default"}, "pi": {"method": "linear"}, "ntk": {"method": "ntk"},
                         "yarn": {"method": "yarn"}},
            "eval": {"ppl_num_samples": 1, "mis_num_samples": 1, "passkey_num_samples": 1}}


def test_a_failing_cell_is_recorded_the_others_run_and_the_command_exits_1(tmp_path, tiny_folder, monkeypatch,
                                                                           capsys):
    """lm-eval crashing in one cell (an executor that plays the crash: no model runs) and writing nothing in the
    others: every cell is recorded failed with its own reason, the report is written, the exit status is 1."""
    import torchtune_longshort.study.table1.runner as runner
    from torchtune_longshort.study.table1.__main__ import main

    calls = []

    def crash_in_pi(argv, log_path, cwd, env, timeout):
        calls.append(argv)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        pi = "rope=linear," in argv[argv.index("--model_args") + 1]
        log_path.write_text("Traceback (most recent call last):\nRuntimeError: planted crash\n" if pi else "ok\n")
        return 1 if pi else 0

    class Crashing(runner.Table1):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "executor": crash_in_pi})

    monkeypatch.setattr(runner, "Table1", Crashing)
    cfg = tmp_path / "table1.yaml"
    cfg.write_text(yaml.safe_dump(_tiny_raw(tiny_folder)))
    out = tmp_path / "out"
    assert main(["--config", str(cfg), "--out", str(out), "--repo-root", str(tmp_path)]) == 1
    assert len(calls) == 4 and all(a[3] == "run" and "--tasks" in a for a in calls)
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("[table1] 4 cells (4 variants x 1 length), 0 done before, 4 to run")
               for line in lines), lines
    last = lines[-1]
    assert last == "[table1] 4 of 4 cells not ok: base_384, ntk_384, pi_384, yarn_384"  # safe_dump sorts variants
    pi = json.loads((out / "cells/pi_384/result.json").read_text())
    assert pi["status"] == "failed" and pi["error"] == "eval: lm-eval exited with 1: RuntimeError: planted crash"
    base = json.loads((out / "cells/base_384/result.json").read_text())
    assert base["status"] == "failed" and "no lm-eval results file" in base["error"]
    assert "Failed cells: base: eval:" in (out / "report/report.md").read_text()


@pytest.mark.parametrize("when", ["in the first cell", "as the pool starts the first cell's thread"])
def test_ctrl_c_starts_no_further_cell_and_ends_in_one_line(tmp_path, tiny_folder, monkeypatch, capsys, when):
    # Ctrl-C let every queued cell start and run (about an hour on the real config), then ended in a
    # KeyboardInterrupt traceback; SIGTERM ended the command silently and left its lm-eval children running.
    # A stop while the thread pool started the first cell's thread (CI, 2026-12-04; 4 runs in 20) left that cell
    # running unwaited-for: the command ended first, and the cell's record came after it, as "failed"
    import os
    import signal
    import threading

    import torchtune_longshort.study.table1.runner as runner
    from torchtune_longshort.study.table1.__main__ import main

    calls, in_cell = [], threading.Event()

    def stopped_in_the_first(argv, log_path, cwd, env, timeout):
        calls.append(argv)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("stopped\n")
        in_cell.set()
        if len(calls) == 1:
            if when == "in the first cell":
                os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler stops the command
            time.sleep(0.5)
        return 143

    if when != "in the first cell":
        start = threading.Thread.start

        sent = []

        def start_then_stop(thread):  # the pool's submit starts its thread, then registers it
            start(thread)
            if thread.name.startswith("ThreadPoolExecutor") and not sent:
                sent.append(thread.name)
                assert in_cell.wait(30)  # the cell runs in that thread
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, in the main thread, inside submit

        monkeypatch.setattr(threading.Thread, "start", start_then_stop)

    class Stopped(runner.Table1):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "executor": stopped_in_the_first})

    monkeypatch.setattr(runner, "Table1", Stopped)
    cfg = tmp_path / "table1.yaml"
    cfg.write_text(yaml.safe_dump({**_tiny_raw(tiny_folder), "jobs": 1}))
    with pytest.raises(SystemExit) as e:
        main(["--config", str(cfg), "--out", str(tmp_path / "out"), "--repo-root", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 143, err
    assert len(calls) == 1 and err[-1].startswith("python -m torchtune_longshort.study.table1: interrupted (SIGTERM)")
    assert "Traceback" not in "\n".join(err)
    assert signal.getsignal(signal.SIGTERM) is not None and not (tmp_path / "out" / "report").exists()
    # the cell the stop ended is interrupted, not failed (before: "failed", exit 143 of its lm-eval as the error),
    # its record written before the command ends, and a report of the cells so far counts it not run
    first, = (tmp_path / "out").rglob("result.json")
    assert json.loads(first.read_text())["status"] == "interrupted"
    assert main(["--config", str(cfg), "--out", str(tmp_path / "out"), "--repo-root", str(tmp_path),
                 "--report-only"]) == 1
    cells = json.loads((tmp_path / "out" / "report" / "summary.json").read_text())
    assert "interrupted" not in json.dumps(cells) and "failed" not in capsys.readouterr().out


def test_a_result_of_another_spec_is_not_read_and_not_skipped(tmp_path, tiny_folder):
    from torchtune_longshort.study.table1.config import load_table1_config
    from torchtune_longshort.study.table1.runner import Table1

    raw = _tiny_raw(tiny_folder)
    path = tmp_path / "table1.yaml"
    path.write_text(yaml.safe_dump(raw))
    t1 = Table1(load_table1_config(path), output_dir=tmp_path / "out")
    for v in ("pi", "yarn"):
        d = t1.cell_dir(v, 384)
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps({**_rec(v, 384, 5.0, 10.0, 1.0), "spec": t1.spec_of(v, 384)}))
    assert t1.done("pi", 384) is not None and t1.records()["pi_384"]["status"] == "ok"
    raw["variants"]["pi"]["factor"] = 2.0  # pi's spec changes; yarn's does not
    path.write_text(yaml.safe_dump(raw))
    t1 = Table1(load_table1_config(path), output_dir=tmp_path / "out")
    assert t1.done("pi", 384) is None and t1.records()["pi_384"]["status"] == "not run"
    assert t1.done("yarn", 384) is not None and t1.records()["yarn_384"]["status"] == "ok"


def test_a_cell_of_a_cached_model_counts_after_the_cache_moves(tmp_path, tiny_folder, monkeypatch):
    # a `pypi:` model lands in the converted-model cache ($LONGSHORT_CACHE, default under the home): cells committed
    # on one machine named it by that machine's path, and another home ran every cell again
    from torchtune_longshort.study.table1.config import load_table1_config
    from torchtune_longshort.study.table1.runner import Table1

    def table1(folder):
        monkeypatch.setenv("LONGSHORT_CACHE", str(folder.parent))
        path = tmp_path / "table1.yaml"
        path.write_text(yaml.safe_dump(_tiny_raw(folder)))
        return Table1(load_table1_config(path), output_dir=tmp_path / "out")

    t1 = table1(tiny_folder)
    assert t1.spec_of("pi", 384)["checkpoint"] == "<model cache>/ckpt"
    d = t1.cell_dir("pi", 384)
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({**_rec("pi", 384, 5.0, 10.0, 1.0), "spec": t1.spec_of("pi", 384)}))
    other = tmp_path / "another_home_cache" / "ckpt"
    shutil.copytree(tiny_folder, other)
    t1 = table1(other)
    assert t1.done("pi", 384) is not None and t1.records()["pi_384"]["status"] == "ok"
    assert t1.records()["yarn_384"]["status"] == "not run"


def test_an_out_holding_a_users_files_inside_the_checkpoint_or_in_use_is_refused_before_any_cell(
        tmp_path, tiny_folder, capsys):
    # Table 1 wrote over a user's cells/ and table1.json, wrote its cells into the model's own folder, and a second
    # invocation on the same folder ran every cell again beside the first (clobbering its eval.log)
    from torchtune_longshort.study.table1.__main__ import main

    cfg = tmp_path / "table1.yaml"
    cfg.write_text(yaml.safe_dump(_tiny_raw(tiny_folder)))

    def refused(out, words):
        with pytest.raises(SystemExit) as e:
            main(["--config", str(cfg), "--out", str(out), "--report-dir", str(tmp_path / "rep")])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and len(err.splitlines()) == 1 and words in err, err
        assert not (tmp_path / "rep").exists()

    mine = tmp_path / "mine"
    (mine / "cells" / "pi_384").mkdir(parents=True)
    (mine / "cells" / "pi_384" / "result.json").write_text('{"my": "result"}')
    (mine / "table1.json").write_text('{"mine": 1}')
    refused(mine, "holds 'cells', 'table1.json', which no earlier run there wrote")
    assert (mine / "table1.json").read_text() == '{"mine": 1}' and len(list(mine.rglob("*"))) == 4
    refused(tiny_folder / "t1", "lies inside checkpoint_dir=")
    assert not (tiny_folder / "t1").exists()
    out = tmp_path / "busy"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from torchtune_longshort.training.output_dir import OutputDirLock\n"
                               f"OutputDirLock({str(out)!r}, holder='table1').acquire(); print('held', flush=True)\n"
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        refused(out, "in use by another table1")
    finally:
        holder.kill()
        holder.wait()


def test_a_report_dir_holding_a_users_report_is_refused_before_any_cell(tmp_path, tiny_folder, capsys):
    # `--report-dir D` holding the user's report.md: the report wrote over it (after every cell had run); a report
    # folder an earlier Table 1 report wrote is replaced
    from torchtune_longshort.study.table1.__main__ import main

    cfg, rep = tmp_path / "table1.yaml", tmp_path / "rep"
    cfg.write_text(yaml.safe_dump(_tiny_raw(tiny_folder)))
    rep.mkdir()
    (rep / "report.md").write_text("mine")
    argv = ["--config", str(cfg), "--out", str(tmp_path / "out"), "--report-dir", str(rep), "--report-only"]
    with pytest.raises(SystemExit) as e:  # a folder no Table 1 ran in: a report of 16 cells "not run" was made there
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "out' holds no Table 1 cells (no cells/): --report-only reads the folder" in err, err
    assert not (tmp_path / "out").exists() and [p.name for p in rep.iterdir()] == ["report.md"]
    (tmp_path / "out" / "cells").mkdir(parents=True)  # a Table 1's folder (no cell finished)
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--report-dir=" in err and "holds 'report.md', which no earlier run" in err, err
    assert [p.name for p in rep.iterdir()] == ["report.md"] and (rep / "report.md").read_text() == "mine"
    (rep / "report.md").unlink()
    assert main(argv) == 1 and main(argv) == 1  # no cell ran (exit 1); the second replaces the first's report
    with pytest.raises(SystemExit) as e:  # a folder that takes no file: an OSError traceback, after every cell
        main([*argv[:-3], "--report-dir", "/proc", "--report-only"])
    assert e.value.code == 2 and "--report-dir='/proc' does not take new files" in capsys.readouterr().err


def test_a_cell_run_again_keeps_a_users_file_in_its_eval_folder(tmp_path, tiny_folder):
    # a cell of another spec (or a failed one) run again deleted its whole eval/ folder (shutil.rmtree), a user's
    # notes there included; the study's runs remove only lm-eval's files, and name the others
    from torchtune_longshort.study.table1.config import load_table1_config
    from torchtune_longshort.study.table1.runner import Table1

    path = tmp_path / "table1.yaml"
    path.write_text(yaml.safe_dump(_tiny_raw(tiny_folder)))
    logged = []
    t1 = Table1(load_table1_config(path), output_dir=tmp_path / "out", executor=lambda *a: 1, log=logged.append)
    eval_dir = t1.cell_dir("pi", 384) / "eval"
    (eval_dir / "model").mkdir(parents=True)
    (eval_dir / "model" / "results_2026-01-01T00-00-00.json").write_text("{}")  # lm-eval's, of another spec
    (eval_dir / "notes.md").write_text("mine")
    assert t1.run_cell("pi", 384)["status"] == "failed"
    assert (eval_dir / "notes.md").read_text() == "mine" and not (eval_dir / "model").exists()
    assert any("kept 1 file" in m and "notes.md" in m for m in logged), logged


@pytest.mark.parametrize("where", ["a_file", "under_a_file"])
def test_an_out_that_is_a_file_or_lies_under_one_is_refused_as_out_before_the_preflight(tmp_path, tiny_folder, capsys,
                                                                                       where):
    # `--out o`, o a file: refused naming --report-dir='o/report', an option the user never gave; `--out f/o
    # --report-dir rep`, f a file: the pre-flight ran, then '[Errno 20] Not a directory: ...' named no option
    from torchtune_longshort.study.table1.__main__ import main

    cfg, mine = tmp_path / "table1.yaml", tmp_path / "f"
    cfg.write_text(yaml.safe_dump(_tiny_raw(tiny_folder)))
    mine.write_text("mine")
    out, extra = (mine, []) if where == "a_file" else (mine / "o", ["--report-dir", str(tmp_path / "rep")])
    with pytest.raises(SystemExit) as e:
        main(["--config", str(cfg), "--out", str(out), *extra])
    said = capsys.readouterr()
    err = said.err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    # the option given, the path given, and the file that stands in its way: what mkdir itself trips on
    with pytest.raises(OSError) as made:
        out.mkdir(parents=True)
    assert err.startswith(f"{PROG}: error: --out (or the config's output_dir)={str(out)!r} "), err
    assert made.value.errno in (17, 20) and str(mine) in err, err
    assert "pre-flight" not in said.out, said.out
    assert sorted(tmp_path.iterdir()) == [mine, cfg] and mine.read_text() == "mine"
