"""What longshort-eval says besides lm-eval: its --help names our model, its arguments and tasks-path; a task-name
typo gets "did you mean"; a run ends with one line counting the unscored metrics and their reasons."""

from __future__ import annotations

import math
import os
import re
import shlex
import sys

import pytest

from torchtune_longshort.eval.cli_messages import help_preamble, summary_line, tasks_not_found


def test_help_names_the_model_its_arguments_and_tasks_path():
    text = help_preamble()
    for needle in ("--model longshort", "tasks-path", "peft-base STEP --out DIR",
                   "--include_path \"$(longshort-eval tasks-path)\"",
                   "pretrained:", "max_length:", "truncation:", "device:", "cpu_keep_freed_blocks:"):
        assert needle in text, needle


def _description_columns(text, me):
    """For each addition of the preamble (a line ``  <me> <command>``): the columns its description's lines start
    at, on the command's line (after a run of spaces) and on the lines under it."""
    block = text.split("the additions:", 1)[1].split("\n--model_args", 1)[0].splitlines()
    groups = []
    for line in block:
        if line.startswith(f"  {me} "):
            inline = re.search(r"\S( {2,})(?=\S)", line[len(me) + 3:])
            groups.append([] if inline is None else [len(me) + 3 + inline.end()])
        elif line.strip() and groups:
            groups[-1].append(len(line) - len(line.lstrip()))
    return groups


@pytest.mark.parametrize("me", ["longshort-eval", "python -m torchtune_longshort.eval"])
def test_the_help_preamble_reads_right_under_either_name(monkeypatch, me):
    from torchtune_longshort.eval import cli_messages

    monkeypatch.setattr(cli_messages, "prog", lambda: me)
    text = help_preamble()
    groups = _description_columns(text, me)
    assert len(groups) == 3 and all(len(set(g)) <= 1 for g in groups), (groups, text)  # each description aligned
    intro = text.split("\n\n", 1)[0]
    assert intro.startswith(f"{me}: ") and max(map(len, intro.splitlines())) <= len(text.splitlines()[-1]), intro


def _stock_command_as_lm_eval_reads_it(text):
    """The stock lm-eval command ``text`` gives after 'for stock lm-eval:', parsed by lm-eval's own CLI parser."""
    from lm_eval._cli.harness import HarnessCLI

    line = text.split("for stock lm-eval:", 1)[1].strip().splitlines()[0]
    argv = shlex.split(line.split(" ...", 1)[0])
    assert argv[0] in ("lm-eval", "lm_eval"), argv
    try:
        return HarnessCLI()._parser.parse_args(argv[1:])
    except SystemExit:
        raise AssertionError(f"lm-eval's parser refuses the help's stock command: {line}") from None


def test_the_helps_stock_lm_eval_command_names_a_model_lm_eval_runs(monkeypatch, capsys):
    # both said `lm_eval --include_path "$(longshort-eval tasks-path)" --tasks longshort_ppl ...`: no subcommand
    # (lm-eval --help gives `lm-eval run`) and no pretrained=, which lm-eval's hf model needs
    import torchtune_longshort.eval.__main__ as cli

    monkeypatch.setattr(sys, "argv", ["longshort-eval", "tasks-path", "--help"])
    cli.main()
    for text in (help_preamble(), capsys.readouterr().out):
        args = _stock_command_as_lm_eval_reads_it(text)
        assert (args.command, args.model) == ("run", "hf"), text
        assert "pretrained" in args.model_args and args.include_path and args.tasks, text


def test_the_stock_commands_tasks_path_is_asked_of_the_command_as_started(monkeypatch):
    """Under ``python -m torchtune_longshort.eval`` (no ``longshort-eval`` on the PATH, a checkout) both helps said
    ``"$(longshort-eval tasks-path)"``; the hint now runs the command as the user started it. Reference: the argv this
    test starts it with (``tasks-path --help``, a fresh interpreter), and the name the preamble is given."""
    import os
    import subprocess
    from pathlib import Path

    from torchtune_longshort.eval import cli_argv

    started = [sys.executable, "-m", "torchtune_longshort.eval", "tasks-path"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([*started, "--help"], capture_output=True, text=True, env=env, check=True).stdout
    inner = shlex.split(re.search(r'"\$\(([^)]*)\)"', out)[1])
    assert inner[1:] == started[1:] and inner[0].startswith("python"), out
    for me in ("python -m torchtune_longshort.eval", "longshort-eval"):
        monkeypatch.setattr(cli_argv, "prog", lambda: me)
        assert f'--include_path "$({me} tasks-path)"' in help_preamble()


def test_a_task_typo_gets_did_you_mean():
    known = ["longshort_ppl", "longshort_passkey", "longshort_babilong", "hellaswag"]
    line = tasks_not_found("Tasks not found: longshort_pll, nothing_like_it", known)
    assert line.startswith("--tasks: no task 'longshort_pll' (did you mean 'longshort_ppl'")
    assert "'nothing_like_it'; `longshort-eval ls tasks` lists them" in line
    assert tasks_not_found("some other error", known) == ""


def test_spaces_in_a_tasks_list_are_read_past():
    # "longshort_ppl, longshort_passkey": lm-eval looked for ' longshort_passkey' and suggested the name itself
    from torchtune_longshort.eval.cli_run import lm_eval_argv, option

    out = lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl, longshort_passkey ,", "--device", "cpu",
                        "--gen_kwargs", ""])
    assert option(out, "--tasks") == "longshort_ppl,longshort_passkey" and out[out.index("--gen_kwargs") + 1] == ""
    assert option(lm_eval_argv(["run", "--tasks= a , b", "--device", "cpu"]), "--tasks") == "a,b"


def test_a_tilde_in_a_path_option_after_an_equals_sign_is_the_home_folder(tmp_path, monkeypatch):
    # `--output_path=~/ev` (no shell expands a tilde after "="): lm-eval made a folder named "~" in the working
    # directory, after the wrapper had checked the home folder's; a --config YAML's output_path the same
    from torchtune_longshort.eval.cli_run import lm_eval_argv, option

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "ev.yaml").write_text("output_path: ~/from_yaml\n")
    home = str(tmp_path / "home")
    out = lm_eval_argv(["run", "--tasks", "longshort_ppl", "--device", "cpu", "--output_path=~/ev"])
    assert option(out, "--output_path") == f"{home}/ev" and "--output_path=" + home + "/ev" in out
    out = lm_eval_argv(["run", "--tasks", "longshort_ppl", "--device", "cpu", "--config=~/ev.yaml"])
    assert option(out, "--config") == f"{home}/ev.yaml" and option(out, "--output_path") == f"{home}/from_yaml"
    assert not (tmp_path / "~").exists()
    # `--use_cache=~/c`: lm-eval opened the sqlite file "~/c_rank0.db" under the working directory
    out = lm_eval_argv(["run", "--tasks", "longshort_ppl", "--device", "cpu", "--use_cache=~/c"])
    assert option(out, "--use_cache") == os.path.expanduser("~/c") == f"{home}/c"
    # `-o=DIR` is DIR, as lm-eval's argparse reads it: the wrapper passed "=DIR" (a folder named "=" was made)
    from torchtune_longshort.eval.cli_argv import canonical_options

    assert canonical_options(["run", "-o=~/ev", "-Mhf"]) == ["run", "--output_path", "~/ev", "--model", "hf"]


def test_a_predict_only_run_is_not_said_to_have_scored():
    # lm-eval's --predict_only placeholder (bypass 999) was counted: "1 metric(s) scored, none unscored"
    results = {"results": {"longshort_passkey": {"alias": "longshort_passkey", "bypass,none": 999,
                                                 "bypass_stderr,none": "N/A"}}}
    assert summary_line(results) == "[longshort-eval] --predict_only: the outputs are written, no metric scored"
    results["results"]["longshort_ppl"] = {"ppl_512,none": 9.5}
    assert summary_line(results) == "[longshort-eval] 1 metric scored, none unscored"
    # longshort_ppl alone under --predict_only: lm-eval writes no placeholder for it, only its metric list swapped
    # (the line said "0 metric(s) scored, none unscored")
    ppl = {"results": {"longshort_ppl": {"name": "longshort_ppl", "alias": "longshort_ppl", "sample_len": 0}},
           "configs": {"longshort_ppl": {"metric_list": [{"metric": "bypass"}]}}}
    assert summary_line(ppl) == "[longshort-eval] --predict_only: the outputs are written, no metric scored"


def test_summary_line_counts_unscored_metrics_with_reasons():
    results = {
        "results": {"longshort_ppl": {"alias": "longshort_ppl", "sample_len": 2, "ppl_128,none": 183.1,
                                      "ppl_128_stderr,none": "N/A", "ppl_1k,none": math.nan,
                                      "token_nll_1k,none": math.nan, "token_nll_128,none": 5.2},
                    "longshort_passkey": {"acc_256,none": 1.0}},
        "configs": {"longshort_ppl": {"not_scored": {"needs 1024 tokens but runs at most 256": 2}}},
    }
    assert summary_line(results) == (
        "[longshort-eval] 3 metrics scored, 2 unscored: longshort_ppl: ppl_1k, token_nll_1k "
        "(needs 1024 tokens but runs at most 256 (2 samples))")
    del results["results"]["longshort_ppl"]
    assert summary_line(results) == "[longshort-eval] 1 metric scored, none unscored"


def test_lm_evals_own_argument_errors_and_validate_are_one_line_refusals(capsys, monkeypatch):
    """lm-eval's parsers printed their usage above the error (two lines and more, under the name ``lm-eval``), and
    ``validate`` printed ``Tasks not found: ...`` on stdout with exit 1 and no nearest name; each is now one line
    ``longshort-eval: error: ...``, exit 2, as ``run``'s unknown task is."""
    from torchtune_longshort.eval.__main__ import main

    for args, needle in [(["run", "--model", "dummy", "--tasks", "longshort_ppl", "--limit", "abc"],
                          "--limit abc: give a whole number of documents per task"),
                         (["run", "--bogus", "1"], "unrecognized arguments: --bogus 1"),
                         (["validate", "--tasks", "longshort_pll"],
                          "no task 'longshort_pll' (did you mean 'longshort_ppl'")]:
        monkeypatch.setattr(sys, "argv", ["longshort-eval", *args])
        with pytest.raises(SystemExit) as e:
            main()
        out, err = capsys.readouterr()
        assert e.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith("longshort-eval: error: ") and needle in err, err
        assert "Tasks not found" not in out


def test_a_run_of_an_unknown_task_names_the_nearest_from_the_index_lm_eval_built(capsys, monkeypatch):
    """``run --tasks longshort_pll``: the nearest names come from the task index lm-eval's CLI built for the run; a
    second index of the same folders was built only to say them (seconds over ~14,000 YAMLs). The indexes with
    lm-eval's own tasks are counted as they are built, and made of the pack alone here (cheap)."""
    import lm_eval.tasks

    from torchtune_longshort.eval.__main__ import main

    built = []

    class PackOnly(lm_eval.tasks.TaskManager):
        def __init__(self, *args, **kwargs):
            if kwargs.get("include_defaults", True):  # an index with lm-eval's own tasks (the pack's own: cheap)
                built.append(kwargs.get("include_path"))
            super().__init__(*args, **{**kwargs, "include_defaults": False})

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", PackOnly)
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run", "--model", "dummy", "--tasks", "longshort_pll"])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert "no task 'longshort_pll' (did you mean 'longshort_ppl'" in err, err
    assert len(built) == 1, built


def test_summary_line_counts_a_member_without_data_as_unscored_with_its_reason():
    # a group member without data reports only lm-eval's `missing_data` = 1: it was counted as a scored metric, and
    # the member's reason was left out
    results = {"results": {"longshort_babilong": {"acc,none": 0.5},
                           "longshort_babilong_qa1": {"missing_data,none": 1.0},
                           "longshort_babilong_qa2": {"acc,none": 0.5, "missing_data,none": 0.0}},
               "configs": {"longshort_babilong_qa1": {"not_scored": {"no file qa1.jsonl": 1}}}}
    assert summary_line(results) == ("[longshort-eval] 2 metrics scored, 1 unscored: longshort_babilong_qa1: every "
                                     "metric (no data) (no file qa1.jsonl)")
    # the group's own value unscored too: its reason was "(no reason recorded)"; a group averages its members'
    results["results"]["longshort_babilong"]["acc,none"] = math.nan
    results["group_subtasks"] = {"longshort_babilong": ["longshort_babilong_qa1", "longshort_babilong_qa2"]}
    # ... said once, by the member beside it (each reason was told twice: a BABILong group's line ran to 4,000
    # characters), and a long reason cut (the results file keeps it whole)
    assert summary_line(results).endswith("longshort_babilong: acc (a group: the reasons are its members'); "
                                          "longshort_babilong_qa1: every metric (no data) (no file qa1.jsonl)")
    # a group with scores whose members lack data: its own marker (lm-eval's mean of its members') said "every metric
    # (no data)" of a group that had an accuracy; the members say which have none
    results["results"]["longshort_babilong"] = {"acc,none": 0.5, "missing_data,none": 1.0}
    assert summary_line(results) == ("[longshort-eval] 2 metrics scored, 1 unscored: longshort_babilong_qa1: every "
                                     "metric (no data) (no file qa1.jsonl)")
    # one length's data missing, another's scored: the member has its accuracy, and was said to have no metric
    results["results"]["longshort_babilong_qa1"] = {"acc,none": 0.0, "acc_0k,none": 0.0, "missing_data,none": 1.0}
    assert summary_line(results) == ("[longshort-eval] 4 metrics scored, 1 unscored: longshort_babilong_qa1: part of "
                                     "its data (no data) (no file qa1.jsonl)")
    results["configs"]["longshort_babilong_qa1"]["not_scored"] = {"x" * 1000: 1}
    assert len(summary_line(results)) < 500 and summary_line(results).endswith("x…)")


def test_the_longshort_models_arguments_are_refused_before_lm_eval_starts(tmp_path, tiny_llama2_dir):
    """A missing checkpoint folder or an unknown model argument was refused after lm-eval's start-up log (its
    INFO lines, then task loading); it is now the whole output: one line, exit 2."""
    import os
    import subprocess
    from pathlib import Path

    from warm_start import with_warm_start

    env = dict(os.environ, PYTHONPATH=with_warm_start(str(Path(__file__).resolve().parents[1])), TMPDIR=str(tmp_path))
    cli = str(Path(sys.executable).with_name("longshort-eval"))
    for model_args, needle in [(f"pretrained={tmp_path / 'missing'}", f"pretrained='{tmp_path / 'missing'}' does not "
                                                                      "exist"),  # it said checkpoint_dir=
                               (f"pretrained={tiny_llama2_dir},bogus=1", "unknown model_args ['bogus']")]:
        p = subprocess.run([cli, "run", "--model", "longshort", "--model_args", model_args, "--tasks", "longshort_ppl",
                            "--output_path", str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        said = (p.stdout + p.stderr).strip().splitlines()
        assert p.returncode == 2 and len(said) == 1 and said[0].startswith("longshort-eval: error: "), said
        assert needle in said[0] and not (tmp_path / "out").exists(), said


def test_a_limit_lm_eval_would_fail_on_or_cut_is_refused_before_it_starts():
    """lm-eval takes --limit < 1 as a fraction (ceil) and >= 1 as a count (int): 0 failed after the model had loaded
    ("task.build_requests() did not find any docs!"), -1 with an islice error naming no option, and 1.5 ran one
    document without a word. They are refused before lm-eval starts; a count or a fraction passes."""
    from torchtune_longshort.eval.cli_run import lm_eval_argv

    def argv(limit):
        return ["run", "--model", "dummy", "--tasks", "longshort_ppl", "--device", "cpu", "--limit", limit]

    for bad in ("0", "-1", "1.5", "nan"):
        with pytest.raises(ValueError, match=rf"^--limit {bad} is not accepted: give a whole number .* between 0 and"):
            lm_eval_argv(argv(bad))
    for good in ("0.5", "1", "10", "3.0"):
        assert "--limit" in lm_eval_argv(argv(good))


def test_check_integrity_that_cannot_pass_is_refused_before_it_starts(monkeypatch, tmp_path):
    """lm-eval's --check_integrity runs pytest on its repository's tests/test_version_stable.py once the model has
    loaded: from an installed lm-eval it ended in a ModuleNotFoundError / FileNotFoundError traceback, and a pack task
    has no test there. Refused in one line naming why; lm-eval's own task with its tests and pytest goes on."""
    from lm_eval import evaluator_utils

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    def argv(task, *more):
        return ["run", "--model", "dummy", "--tasks", task, "--device", "cpu", *more]

    with pytest.raises(ValueError, match=r"^--check_integrity runs lm-eval's own .* the pack's tasks \(longshort_ppl\) "
                                         r"have no test there: leave --check_integrity out$"):
        lm_eval_argv(argv("longshort_ppl", "--check_integrity"))

    def no_root(start_path):
        raise FileNotFoundError(start_path)

    monkeypatch.setattr(evaluator_utils, "find_test_root", no_root)
    with pytest.raises(ValueError, match=r"installed without its repository's tests: leave --check_integrity out$"):
        lm_eval_argv(argv("hellaswag", "--check_integrity"))
    monkeypatch.setattr(evaluator_utils, "find_test_root", lambda start_path: tmp_path)
    assert "--check_integrity" in lm_eval_argv(argv("hellaswag", "--check_integrity"))  # pytest: the dev venv's
    assert "--check_integrity" not in lm_eval_argv(argv("longshort_ppl"))


def test_tasks_path_takes_no_arguments(capsys, monkeypatch):
    # `longshort-eval tasks-path --foo` printed the path and exited 0
    from torchtune_longshort.eval.__main__ import main
    from torchtune_longshort.eval.tasks import tasks_path

    monkeypatch.setattr(sys, "argv", ["longshort-eval", "tasks-path"])
    main()
    assert capsys.readouterr().out == f"{tasks_path()}\n"
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "tasks-path", "--foo"])
    with pytest.raises(SystemExit) as e:
        main()
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and err.count("\n") == 1
    assert "tasks-path takes no arguments (got --foo)" in err
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "tasks-path", "--help"])
    main()
    assert capsys.readouterr().out.startswith("usage: longshort-eval tasks-path\n")


def test_run_cli_reads_back_the_results_of_either_output_path_form(tmp_path):
    # lm-eval's own tracker writes the files: `--output_path run/` -> run/<model>/results_<date>.json, and
    # `--output_path run/res.json` -> run/res_<date>.json with the samples beside it; run_cli and samples_of looked
    # under run/res.json itself and raised FileNotFoundError after a finished run
    from lm_eval.loggers import EvaluationTracker

    from torchtune_longshort.eval.report.run_files import samples_of
    from torchtune_longshort.eval.report.run_files import results_files  # what run_cli reads back with

    sample = {"doc_id": 0, "doc_hash": "a", "prompt_hash": "b", "target_hash": "c", "target": "t",
              "arguments": [("ctx",)], "resps": [["x"]], "filtered_resps": ["x"]}
    for output_path in (tmp_path / "folder", tmp_path / "file" / "res.json"):
        tracker = EvaluationTracker(output_path=str(output_path))
        tracker.general_config_tracker.model_name_sanitized = "m"
        tracker.save_results_aggregated(results={"results": {"t": {"acc,none": 1.0}}, "configs": {"t": {}},
                                                 "config": {"model": "m"}}, samples={"t": [sample]})
        tracker.save_results_samples(task_name="t_sub", samples=[{**sample, "doc_id": 1}])  # another task
        tracker.save_results_samples(task_name="t", samples=[dict(sample)])
        assert '"acc,none": 1.0' in results_files(output_path)[-1].read_text()
        assert [(r["doc_id"], r["resps"]) for r in samples_of(output_path, "t")] == [(0, [["x"]])]
    assert results_files(tmp_path / "file" / "res.json")[-1].name.startswith("res_")
    try:
        samples_of(tmp_path / "file" / "res.json", "other")
    except FileNotFoundError as e:
        where = tmp_path / "file" / "res.json"
        assert str(e) == f"lm-eval wrote no samples_other_<date>.jsonl for --output_path {where}"
    else:
        raise AssertionError("no FileNotFoundError")


def test_run_alone_prints_lm_evals_run_help_and_exits_0(monkeypatch, capsys):
    # `lm-eval run` prints run's help, exit 0; `longshort-eval run` ran an evaluation of no task: lm-eval's start-up
    # log ('Selected Tasks: []', the seeds) and 'longshort-eval: error: No tasks specified, or no tasks found.', exit 2
    from lm_eval._cli.harness import HarnessCLI

    import torchtune_longshort.eval.__main__ as cli

    monkeypatch.setattr(sys, "argv", ["lm-eval", "run"])
    with pytest.raises(SystemExit) as exit_info:  # the reference: lm-eval's own CLI
        HarnessCLI().parse_args()
    assert exit_info.value.code == 0
    stock = capsys.readouterr().out
    assert stock.startswith("usage: lm-eval run"), stock
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0 and out.endswith(stock) and help_preamble() in out and not err.strip(), err


def test_a_verbosity_lm_eval_would_fail_on_after_the_run_is_refused_before_it_starts(monkeypatch):
    """lm-eval 0.4.13 applies --verbosity (upper-cased) only after every task has run: `--verbosity LOUD` evaluated
    everything, then failed 'Unknown level' (a traceback; longshort-eval: one line) and saved no results. Refused
    before lm-eval starts exactly where lm-eval's own setup_logging would fail (the reference, run here)."""
    import logging

    from lm_eval import utils

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    argv = ["run", "--model", "dummy", "--tasks", "longshort_ppl", "--device", "cpu"]
    lm_eval_logger = logging.getLogger("lm_eval")
    monkeypatch.setattr(lm_eval_logger, "level", lm_eval_logger.level)  # setup_logging sets it: given back after
    monkeypatch.setattr(utils, "_LOGGING_CONFIGURED", True)  # and adds no handler to the logger of later tests
    spellings = [lambda v: ["--verbosity", v], lambda v: ["-v", v], lambda v: [f"--verbosity={v}"]]
    seen = set()
    cases = [(env, level) for env in ("", "warning") for level in ("LOUD", "debug", "10", "NOTSET")] + [("LOUDER", "x")]
    for i, (env, level) in enumerate(cases):
        monkeypatch.setenv("LMEVAL_LOG_LEVEL", env)
        try:
            utils.setup_logging(verbosity=level.upper())  # as lm-eval's parser (type=str.upper) hands it on
            fails = False
        except ValueError:
            fails = True
        seen.add(fails)
        given = argv + spellings[i % 3](level)
        if fails:
            with pytest.raises(ValueError, match=rf"^--verbosity {level} is no logging level: give DEBUG, "):
                lm_eval_argv(given)
        else:
            assert any(a.startswith("--verbosity") for a in lm_eval_argv(given)), (env, level)
    assert seen == {True, False}
