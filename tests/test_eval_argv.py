"""longshort-eval's command line as lm-eval's: the argv rewrite only for --model longshort and only checkpoint_dir,
lm-eval's short and abbreviated option names reaching the wrapper's rules, a model_args device or batch_size going as
the option, bad paths refused. Split from test_eval_pretrained.py."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv  # noqa: E402

from torchtune_longshort.eval.tasks import tasks_path  # noqa: E402


def test_argv_rewrite_only_for_longshort_and_only_checkpoint_dir():
    a = ["run", "--model", "longshort", "--model_args", "checkpoint_dir=/c,tokenizer=/t", "--tasks", "x"]
    assert lm_eval_argv(a)[4] == "pretrained=/c,tokenizer=/t"
    b = ["run", "--model", "longshort", "--model_args", "tokenizer=/t", "checkpoint_dir=/c", "--tasks", "x"]
    assert lm_eval_argv(b)[4:6] == ["tokenizer=/t", "pretrained=/c"]
    c = ["run", "--model=longshort", "--model_args=tokenizer=/t,checkpoint_dir=/c"]
    assert lm_eval_argv(c)[2] == "--model_args=tokenizer=/t,pretrained=/c"
    for same in (["run", "--model", "hf", "--model_args", "checkpoint_dir=/c"],
                 ["run", "--model", "longshort", "--model_args", "pretrained=/p,checkpoint_dir=/p"]):
        # unchanged but for the pack's folder, a device that exists and the --metadata naming the model (for tasks
        # that need longshort)
        added = lm_eval_argv(same)[len(same):]
        assert lm_eval_argv(same)[: len(same)] == same and added == [
            "--include_path", str(tasks_path()), "--device", added[3], "--metadata", json.dumps({"lm_eval_model": same[2]})]


def test_lm_evals_short_and_abbreviated_option_names_reach_the_wrappers_rules(tmp_path):
    """``-M longshort`` (lm-eval's short name) was evaluated by the longshort model while the wrapper recorded
    ``hf`` as the run's model, so longshort_misalignment scored NaN ("this run uses --model hf"); ``-o <a file>``
    was not refused before the evaluation. Every spelling lm-eval's parser accepts is read as its long name."""
    short = lm_eval_argv(["run", "-M", "longshort", "-a", "checkpoint_dir=/c", "-t", "x", "-b", "2"])
    assert short[:8] == ["run", "--model", "longshort", "--model_args", "pretrained=/c", "--tasks", "x",
                         "--batch_size"]
    assert json.loads(short[short.index("--metadata") + 1]) == {"lm_eval_model": "longshort"}
    attached = lm_eval_argv(["run", "-Mlongshort", "--model_arg", "checkpoint_dir=/c"])
    assert attached[1:5] == ["--model", "longshort", "--model_args", "pretrained=/c"]
    (tmp_path / "afile").write_text("")
    for spelling in (["-o", str(tmp_path / "afile")], ["--output", str(tmp_path / "afile")]):
        with pytest.raises(NotADirectoryError, match="--output_path"):
            lm_eval_argv(["run", "--model", "hf", *spelling])


def test_a_model_args_device_alone_goes_as_the_device_option():
    """lm-eval 0.4.13 passes its own --device (default cuda:0) beside model_args: ``device=`` in model_args alone
    reached the model twice (TypeError, with hf too); it is passed as ``--device`` instead."""
    for model in ("longshort", "hf"):
        for args in (["--model_args", "pretrained=/p,device=cpu,dtype=float32"],
                     ["--model_args=device=cpu,pretrained=/p"]):
            out = lm_eval_argv(["run", "--model", model, *args])
            assert out[out.index("--device") + 1] == "cpu" and out.count("--device") == 1
            spans = [a for a in out if "pretrained=/p" in a]
            assert len(spans) == 1 and "device=" not in spans[0], out


def test_a_model_args_batch_size_goes_as_the_option_and_bad_paths_are_refused(tmp_path):
    """The same for ``batch_size`` and ``max_batch_size`` (lm-eval passes its own beside model_args: TypeError,
    "got multiple values for keyword argument 'batch_size'"); given both ways, refused. An ``--output_path`` that
    is a file or cannot be created, and a missing ``--include_path``: lm-eval evaluated, then only warned that it
    could not save (exit 0), or found no task; a --metadata that is not JSON was lm-eval's 'Invalid JSON', naming no
    option; refused before anything runs."""
    out = lm_eval_argv(["run", "--model", "longshort", "--model_args", "pretrained=/p,batch_size=4,max_batch_size=8"])
    assert out[out.index("--batch_size") + 1] == "4" and out[out.index("--max_batch_size") + 1] == "8"
    assert [a for a in out if "pretrained=/p" in a] == ["pretrained=/p"]
    (tmp_path / "afile").write_text("")
    (tmp_path / "__p").write_text("mine")
    (tmp_path / "lk").mkdir()
    (tmp_path / "lk" / "__p").symlink_to(tmp_path / "gone")  # a link to nothing there: lm-eval's mkdir fails as well
    (tmp_path / "ok" / "__p").mkdir(parents=True)  # an earlier run's results folder: written in again, not refused
    lm_eval_argv(["run", "--model", "hf", "--model_args", "pretrained=/p", "--output_path", str(tmp_path / "ok")])
    for args, error, match in [
            (["--model_args", "pretrained=/p,batch_size=4", "--batch_size", "2"], ValueError, "give it once"),
            (["--output_path", str(tmp_path / "afile")], NotADirectoryError, "is a file, not a folder"),
            # a file where lm-eval's <output_path>/<model> folder goes: it evaluated, then could not save
            (["--model_args", "pretrained=/p", "--output_path", str(tmp_path)], NotADirectoryError,
             "__p', the folder lm-eval writes the results in .* is a file, not a folder"),
            (["--model_args", "pretrained=/p", "--output_path", str(tmp_path / "lk")], NotADirectoryError,
             "lk/__p', the folder lm-eval writes the results in"),
            (["--output_path", "/proc/longshort_x/r.json"], PermissionError, "cannot be created"),
            (["--output_path", "/proc"], PermissionError, "does not take new files"),  # evaluated, then not saved
            (["--include_path", str(tmp_path / "absent")], FileNotFoundError, "--include_path .* does not exist"),
            (["--metadata", "{'max_seq_lengths': '1k'}"], ValueError, r"--metadata .* is not JSON \(Expecting")]:
        with pytest.raises(error, match=match):
            lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", *args])
    out = lm_eval_argv(["run", "--model", "hf", "--output_path", str(tmp_path / "new" / "r.json")])  # lm-eval's file form
    assert not (tmp_path / "new").exists()
    # checked on disk before lm-eval starts (check_arguments): a pretrained path that is no folder (transformers took
    # it for a hub name: a 69-line traceback), a --metadata key no task of the pack reads (passed on, unread: the
    # tasks ran at their default lengths)
    for args, error, match in [
            (["--model_args", f"pretrained={tmp_path / 'absent'}"], FileNotFoundError, "absent: does not exist; "
             "--model hf needs a checkpoint folder"),
            (["--model_args", f"pretrained={tmp_path / 'afile'}"], FileNotFoundError, "afile: is a file"),
            (["--metadata", '{"max_seq_length": "1k"}'], ValueError, r"key\(s\) \['max_seq_length'\]: no task of the "
             r"pack reads them \(did you mean 'max_seq_lengths'\?\)"),
            (["--metadata", "ppl_source=stdlib", "max_seq_length=1k"], ValueError, "'max_seq_length'"),
            # values a task scored NaN for, the run exiting 0
            (["--metadata", '{"ppl_source": "stdlb"}'], ValueError, "ppl_source='stdlb' is not a source; accepted: "),
            (["--metadata", '{"mis_num_samples": -1}'], ValueError, "mis_num_samples=-1: expected an integer >= 1"),
            (["--metadata", '{"ppl_join_documents": "yes"}'], ValueError, "ppl_join_documents='yes': expected true"),
            # each family's own values (TaskFamily.value_kinds): a passkey depth past 100 (the task's TaskDataError,
            # scored NaN), depths that are not numbers (a comma list of them is taken), a BABILong / LongBench-E
            # folder that is not there (every length reported missing_data), a haystack that is not a source
            (["--metadata", '{"passkey_depths": [0, 150]}'], ValueError, r"passkey_depths=\[0, 150\]: expected "
             r"percentages in \[0, 100\]"),
            (["--metadata", '{"passkey_depths": "0,a"}'], ValueError, "passkey_depths='0,a': expected percentages"),
            (["--metadata", json.dumps({"babilong_data_dir": str(tmp_path / "absent")})], ValueError,
             "babilong_data_dir=.*absent': expected a folder that exists"),
            (["--metadata", '{"longbench_e_missing": "ignore"}'], ValueError, "expected skip or error"),
            (["--metadata", '{"babilong_prompt": "babilon"}'], ValueError, "babilong_prompt='babilon': expected "
             "lm_eval or babilong"),
            (["--metadata", json.dumps({"passkey_data_files": [str(tmp_path / "nope.jsonl")]})], ValueError,
             "passkey_data_files=.*nope.jsonl'\\]: expected a file, or a list of files, that exist"),
            # a text family's files that name nothing: scored NaN, exit 0, a results file written
            (["--metadata", json.dumps({"ppl_data_files": str(tmp_path / "none" / "*.jsonl")})], ValueError,
             r"ppl_data_files='.*none/\*.jsonl' does not exist \(no such file, folder or glob match\): name files"),
            (["--metadata", json.dumps({"mis_data_files": [str(tmp_path / "nope.txt")]})], ValueError,
             "mis_data_files='.*nope.txt' does not exist"),
            (["--metadata", '{"passkey_haystack": "stdlb"}'], ValueError, "passkey_haystack='stdlb': expected one of "
             "filler, stdlib"),
            # a length the task cannot score: "0" ran, wrote ppl_0k: NaN and exited 0 (-64 was refused)
            (["--metadata", '{"max_seq_lengths": "0"}'], ValueError, r"max_seq_lengths='0': longshort_ppl scores "
             r"lengths of at least 2 tokens \(0 given\)"),
            (["--metadata", '{"max_seq_lengths": "2k", "ppl_max_seq_lengths": [1, 1024]}'], ValueError,
             r"ppl_max_seq_lengths=\[1, 1024\]: .*\(1 given\)")]:
        with pytest.raises(error, match=match):
            check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", *args]))
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl,hellaswag", "--metadata",
                                  '{"max_seq_length": "1k"}']))  # a built-in task may read any key
    # BABILong's 0k is its empty haystack; the task's own key wins over the shared one
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_babilong,longshort_ppl", "--metadata",
                                  '{"max_seq_lengths": "0k,1k", "ppl_max_seq_lengths": "1k"}']))
    # unset values, as the study writes them for a family it does not evaluate: the task's defaults
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--metadata",
                                  '{"mis_max_seq_lengths": [], "mis_num_samples": null, "ppl_source": "stdlib"}']))
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--metadata", json.dumps(
        {"passkey_depths": [0, 50.5, 100], "babilong_data_dir": str(tmp_path), "passkey_haystack": "filler"})]))
