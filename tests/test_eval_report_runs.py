"""The report's runs: what one run is (a results folder or one of its files), the settings that make two runs not
comparable (--limit, --metadata, n-shot, chat template, a --samples subset), --limit as lm-eval reads it, and why a
run has no per-position curve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchtune_longshort.eval.report import build_report, main
from torchtune_longshort.eval.report.results_io import load_results
from report_runs import lm_eval_run as _run


D1, D2 = "2026-12-02T06-24-30.467032", "2026-12-02T06-24-38.187160"


def _lm_eval_file(path, model="longshort", limit=None, metadata=None, shots=0, tasks=("longshort_ppl",), ppl=3.0):
    """A results file with lm-eval 0.4.13's keys: per task its ``configs`` metadata (the YAML's, with --metadata and
    --model_args over it, as lm-eval merges them), ``n-shot`` and ``n-samples``."""
    from torchtune_longshort.eval.report.one_run import pack_defaults

    path.parent.mkdir(parents=True, exist_ok=True)
    md = lambda t: {**pack_defaults().get(t, {}), **(metadata or {}), "pretrained": "/ckpt/a"}  # noqa: E731
    data = {"results": {t: {"ppl_256,none": ppl} if t == "longshort_ppl" else {"acc,none": 0.5} for t in tasks},
            "configs": {t: {"metadata": md(t)} for t in tasks}, "versions": {t: 3.0 for t in tasks},
            "n-shot": {t: shots for t in tasks}, "n-samples": {t: {"original": 2, "effective": 2} for t in tasks},
            "config": {"model": model, "model_args": {"pretrained": "/ckpt/a"}, "limit": limit,
                       "model_dtype": "torch.float32", "device": "cpu"}}
    path.write_text(json.dumps(data))
    return path


def test_a_run_written_with_output_path_json_is_read_from_its_file_or_folder(tmp_path, capsys):
    """`lm_eval --output_path ff/hf_res.json` writes ff/hf_res_<date>.json and ff/samples_<task>_<date>.jsonl: the
    report said the folder "holds no lm-eval results_*.json file" and refused the file. Now both are read: the file
    with its own samples (same date), the folder by content (a user's dated JSON is not a run)."""
    ff = tmp_path / "ff"
    hf = _lm_eval_file(ff / f"hf_res_{D1}.json", model="hf", ppl=5.0)
    ours = _lm_eval_file(ff / f"ls_res_{D2}.json", ppl=4.0)
    (ff / f"samples_longshort_ppl_{D2}.jsonl").write_text(json.dumps({"curve_mean_nll_2": [1.0, 3.0]}) + "\n")
    (ff / f"notes_{D1}.json").write_text(json.dumps({"results": "mine"}))
    summary = build_report([hf, ours], tmp_path / "rep")
    assert list(summary["runs"]) == ["hf_res", "ls_res"]  # labelled by the --output_path name
    assert summary["longshort_ppl"]["ppl"] == {"hf_res": {"256": 5.0}, "ls_res": {"256": 4.0}}
    assert summary["per_position_mean_nll"] == {"ls_res": {"2": 2.0}}  # its samples, not the other run's
    # the --output_path as given to lm-eval (ff/ls_res.json, which lm-eval never writes) names that run: it was
    # refused as a path that "does not exist"
    named = build_report([ff / "hf_res.json", ff / "ls_res.json"], tmp_path / "rep_named")
    assert named["longshort_ppl"] == summary["longshort_ppl"]
    assert named["per_position_mean_nll"] == {"ls_res": {"2": 2.0}}
    with pytest.raises(FileNotFoundError, match=r"no other_<date>.json results file beside it"):
        build_report([ff / "other.json"], tmp_path / "no")
    with pytest.raises(SystemExit):  # the folder holds two runs: refused, the fix named
        main([str(ff), "--out", str(tmp_path / "no")])
    err = capsys.readouterr().err
    assert "mixes results of different checkpoints / model settings" in err and "name one run's results file" in err
    hf.unlink()
    summary = build_report([ff], tmp_path / "rep2")
    assert summary["longshort_ppl"]["ppl"] == {"ff": {"256": 4.0}} and summary["per_position_mean_nll"] == {
        "ff": {"2": 2.0}}
    with pytest.raises(ValueError, match="is a file but not an lm-eval results file"):
        build_report([ff / f"notes_{D1}.json"], tmp_path / "no")


def test_a_folder_of_runs_with_other_limit_metadata_or_n_shot_is_refused(tmp_path):
    """One --output_path reused: results of another --limit, --metadata or n-shot were merged newest-wins into one
    column under the newest --limit. Refused now, naming what differs; runs of other tasks whose --metadata keys the
    other's tasks do not read stay one run."""
    cases = {"limit": ({}, {"limit": 1.0}, "--limit: all vs 1"),
             "lengths": ({"metadata": {"max_seq_lengths": "256"}, "tasks": ("longshort_ppl", "longshort_passkey")},
                         {"metadata": {"max_seq_lengths": "512"}}, "--metadata max_seq_lengths: '256' vs '512'"),
             "default": ({"metadata": {"max_seq_lengths": "256"}, "tasks": ("longshort_passkey",)}, {},
                         "--metadata max_seq_lengths: '256' vs '2k,4k,8k,16k,32k'"),
             "shots": ({}, {"shots": 1}, "n-shot: longshort_ppl 0 vs 1")}
    for case, (first, second, needle) in cases.items():
        d = tmp_path / case / "m"
        _lm_eval_file(d / f"results_{D1}.json", **first)
        _lm_eval_file(d / f"results_{D2}.json", **second)
        with pytest.raises(ValueError, match="different runs \\(other --limit, --metadata, n-shot or chat templ") as e:
            build_report([d.parent], tmp_path / "no")
        assert needle in str(e.value), str(e.value)
        assert build_report([d / f"results_{D2}.json"], tmp_path / f"rep_{case}")["runs"]  # one file: one run
    d = tmp_path / "chat" / "m"  # a plain run, then a chat-templated one, into one folder (a docs audit)
    _lm_eval_file(d / f"results_{D1}.json", tasks=("longshort_passkey",))
    _lm_eval_file(d / f"results_{D2}.json", tasks=("longshort_passkey",))
    chat = json.loads((d / f"results_{D2}.json").read_text())
    (d / f"results_{D2}.json").write_text(json.dumps({**chat, "chat_template": "<template>"}))
    with pytest.raises(ValueError, match="--apply_chat_template: off vs on \\(longshort_passkey\\)"):
        build_report([d.parent], tmp_path / "no")
    d = tmp_path / "split"  # the tasks of one evaluation run one by one, each given its own keys
    _lm_eval_file(d / f"results_{D1}.json", metadata={"ppl_source": "stdlib"})
    _lm_eval_file(d / f"results_{D2}.json", metadata={"passkey_num_samples": 2}, tasks=("longshort_passkey",))
    assert set(load_results(d)) == {"longshort_ppl", "longshort_passkey"}


def test_limit_is_printed_as_lm_eval_reads_it(tmp_path):
    """lm-eval records --limit as a float: 1.0 was printed `1.0` (1 document, read as 100 %), 0.5 as `0.5`."""
    for limit, shown in ((1.0, "| 1 |"), (0.5, "| 0.5 (fraction) |"), (None, "| all |")):
        d = _lm_eval_file(tmp_path / str(limit) / f"results_{D1}.json", limit=limit).parent
        summary = build_report([d], tmp_path / f"rep_{limit}")
        assert shown in (tmp_path / f"rep_{limit}" / "report.md").read_text()
        assert summary["runs"][str(limit)]["limit"] == (1 if limit == 1.0 else limit)


def test_a_longshort_run_made_with_gen_kwargs_it_cannot_honour_is_marked_as_greedy(tmp_path):
    """Versions before 2026-12-05 ran the longshort model with --gen_kwargs num_beams=4 (or sampling) as plain greedy
    without a word; this one refuses them, but a report of results they wrote showed those scores as asked. Now one
    line names the run and its gen_kwargs; neutral ones, and the hf model (which honours them), get none."""
    runs = {}
    for name, model, kwargs in (("beams", "longshort", {"num_beams": 4}), ("plain", "longshort", {"num_beams": 1}),
                                ("hf", "hf", {"num_beams": 4})):
        f = _lm_eval_file(tmp_path / name / f"results_{D1}.json", model=model)
        data = json.loads(f.read_text())
        data["config"]["gen_kwargs"] = kwargs
        f.write_text(json.dumps(data))
        runs[name] = f.parent
    summary = build_report(list(runs.values()), tmp_path / "rep", allow_mixed=True)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert ("`beams` asked --gen_kwargs num_beams=4, which the longshort model does not decode with (it decodes plain "
            "greedy): versions before 2026-12-05 ran its generation tasks greedy without a word") in md, md
    assert "`plain` asked" not in md and "`hf` asked" not in md
    assert summary["runs"]["beams"]["gen_kwargs"] == {"num_beams": 4}


def test_a_missing_curve_is_given_its_reason(tmp_path):
    """The report blamed the model ("returned no per-token log-probabilities") for a longshort run that only lacked
    --log_samples, and for one whose few-shot context made the task leave the per-token values out."""
    plain = _lm_eval_file(tmp_path / "plain" / f"results_{D1}.json")
    data = json.loads(plain.read_text())
    data["results"]["longshort_ppl"]["curve_mean_nll_256,none"] = 1.1  # longshort scored them; no samples file
    plain.write_text(json.dumps(data))
    shot = _lm_eval_file(tmp_path / "shot" / f"results_{D1}.json", shots=1)
    (shot.parent / f"samples_longshort_ppl_{D1}.jsonl").write_text(json.dumps({"ppl_256": [1.0, 2]}) + "\n")
    build_report([plain.parent, shot.parent], tmp_path / "rep", allow_mixed=True)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert ("No per-position loss curve for `plain`: its run has no `longshort_ppl` samples file: evaluate it with "
            "--log_samples") in md
    assert "No per-position loss curve for `shot`: its samples hold no per-token values" in md and "1-shot" in md
    assert "returned no per-token" not in md


def test_a_samples_subset_is_counted_as_such_and_refused_beside_a_full_run(tmp_path):
    """`--samples '{"longshort_ppl": [0, 3]}'` (which lm-eval records nowhere) evaluated 2 of 4 documents, one per
    length: the report said 4 samples and put the run beside a full one. lm-eval's effective count (the items of
    one length's metric) times the lengths falls short of the documents: at most that many were evaluated, exactly
    the samples file's doc ids when there is one."""
    runs = {}
    for name, effective in (("full", 2), ("subset", 1), ("logged", 1)):
        f = _lm_eval_file(tmp_path / name / f"results_{D1}.json")
        data = json.loads(f.read_text())
        data["results"]["longshort_ppl"]["ppl_512,none"] = 3.5  # two lengths, two documents each
        data["n-samples"]["longshort_ppl"] = {"original": 4, "effective": effective}
        f.write_text(json.dumps(data))
        runs[name] = f.parent
    (runs["logged"] / f"samples_longshort_ppl_{D1}.jsonl").write_text(
        "".join(json.dumps({"doc_id": i}) + "\n" for i in (0, 3)))
    with pytest.raises(ValueError, match=r"differ in --samples \(`full` all documents, `subset` longshort_ppl <= 2 "
                                         r"of 4 documents\)"):
        build_report([runs["full"], runs["subset"]], tmp_path / "no")
    summary = build_report([runs["logged"]], tmp_path / "rep")
    assert "| longshort_ppl: 2 of 4 documents (--samples) |" in (tmp_path / "rep" / "report.md").read_text()
    assert summary["runs"]["logged"]["samples"] == {"longshort_ppl": 2} and summary["samples_cut_off"] == {}
    assert build_report([runs["full"]], tmp_path / "rep_full")["runs"]["full"]["subset"] == {}


def _with(d, **fields):
    f = d / "results_2026-01-01T00-00-00.json"
    data = json.loads(f.read_text())
    for key, value in fields.items():
        data[key] = value
    f.write_text(json.dumps(data))
    return d


def test_runs_of_other_n_shot_or_chat_template_are_refused_on_a_task_both_ran_unless_asked(tmp_path, capsys):
    """A 1-shot or chat-templated passkey run beside a plain one was compared without a word (an lm-eval audit);
    a task that ignored the option (the pack's perplexity: configs.<task>.ignored_options) is no difference."""
    plain = _run(tmp_path / "plain", 4, name="longshort_passkey")
    shot = _with(_run(tmp_path / "shot", 4, name="longshort_passkey"), **{"n-shot": {"longshort_passkey": 1}})
    chat = _with(_run(tmp_path / "chat", 4, name="longshort_passkey"), chat_template="<template>")
    for other, needle in ((shot, "n-shot"), (chat, "--apply_chat_template")):
        with pytest.raises(SystemExit):
            main([str(plain), str(other), "--out", str(tmp_path / f"r_{other.name}")])
        err = capsys.readouterr().err
        assert needle in err and "--allow-mixed" in err, err
    build_report([plain, chat], tmp_path / "mixed", allow_mixed=True)
    ppl_chat = _with(_run(tmp_path / "ppl_chat", 4), chat_template="<template>",
                     configs={"longshort_ppl": {"ignored_options": ["--apply_chat_template"]}})
    build_report([_run(tmp_path / "ppl_plain", 4), ppl_chat], tmp_path / "ppl")  # ignored: same measurement


def _measured(path, task, metadata=None, version=3.0, source=None, pack=None):
    """One run of ``task`` (a results file) whose task ran with ``metadata`` (over its YAML's) at ``version``;
    ``source``: the YAML it was read from (lm-eval records it as ``config_source``), under ``pack`` (default: this
    install's task pack, ``tasks_path()``)."""
    from torchtune_longshort.eval.tasks import tasks_path

    f = _lm_eval_file(path / f"results_{D1}.json", metadata=metadata, tasks=(task,))
    data = json.loads(f.read_text())
    data["versions"][task] = version
    if source:
        data["configs"][task]["metadata"]["config_source"] = str((pack or tasks_path()) / source)
    f.write_text(json.dumps(data))
    return path


LB = "longshort_longbench_2wikimqa_e"
MEASURED = {  # (task, metadata a, metadata b, version b, config_source, what the refusal names)
    "babilong_prompt": ("longshort_babilong_qa1", {}, {"babilong_prompt": "babilong"}, 3.0, None,
                        "longshort_babilong's babilong_prompt (`a` lm_eval, `b` babilong)"),
    "ppl_data": ("longshort_ppl", {"ppl_source": "stdlib"}, {"ppl_data_files": "/data/x.jsonl"}, 3.0, None,
                 "longshort_ppl's ppl_source (`a` stdlib, `b` pg19) and longshort_ppl's ppl_data_files (`a` (the "
                 "task's default), `b` /data/x.jsonl)"),
    "longbench_member_data": (LB, {}, {"longbench_e_data_dir": "/lb"}, 3.0, f"longbench_e/{LB}.yaml",
                              "longshort_longbench_e's longbench_e_data_dir (`a` (the task's default), `b` /lb)"),
    "version": ("longshort_passkey", {}, {}, 2.0, None, "longshort_passkey version (`a` 3.0, `b` 2.0)"),
}


@pytest.mark.parametrize("case", list(MEASURED), ids=list(MEASURED))
def test_runs_whose_task_measured_another_thing_are_refused_naming_the_setting(tmp_path, capsys, case):
    """BABILong's prompt, another data set or another task version side by side read as one measurement: the report
    compared only dtype, --limit, n-shot and chat template across runs. Each run's value of every setting that
    differs is named (TaskFamily.measured_by), refused unless --allow-mixed, then noted and in summary.json."""
    task, ma, mb, version, source, needle = MEASURED[case]
    a, b = _measured(tmp_path / "a", task, ma, 3.0, source), _measured(tmp_path / "b", task, mb, version, source)
    with pytest.raises(SystemExit):
        main([str(a), str(b), "--out", str(tmp_path / "refused")])
    err = capsys.readouterr().err
    assert needle in err and "--allow-mixed" in err and not (tmp_path / "refused").exists(), err
    summary = build_report([a, b], tmp_path / "mixed", allow_mixed=True)
    assert needle in (tmp_path / "mixed" / "report.md").read_text()
    assert summary["runs"]["b"]["task_versions" if case == "version" else "task_settings"]


def test_a_longbench_member_run_by_another_install_is_still_the_packs(tmp_path, capsys):
    """Runs evaluated by another install of the package (the checkout's editable one, a GPU machine's venv, the
    wheel's site-packages elsewhere) record their own pack folder as ``config_source``; LongBench-E's members, named
    after their dataset, were found the pack's only under this install's ``tasks_path()``, so two such runs over
    other data were compared without a word. The pack's own folder layout (``torchtune_longshort/eval/tasks``) is
    the reference."""
    other = Path("/elsewhere/venv/lib/python3.11/site-packages/torchtune_longshort/eval/tasks")
    src = f"longbench_e/{LB}.yaml"
    a = _measured(tmp_path / "a", LB, {}, 3.0, src, pack=other)
    b = _measured(tmp_path / "b", LB, {"longbench_e_data_dir": "/lb"}, 3.0, src, pack=other)
    with pytest.raises(SystemExit):
        main([str(a), str(b), "--out", str(tmp_path / "refused")])
    err = capsys.readouterr().err
    assert "longshort_longbench_e's longbench_e_data_dir (`a` (the task's default), `b` /lb)" in err, err
    # a task of the user's own, read from a folder of theirs with the pack's folder name, is not the pack's
    from torchtune_longshort.eval.report.one_run import task_settings

    d = _measured(tmp_path / "d", LB, {"longbench_e_data_dir": "/lb"}, 3.0, src, pack=tmp_path / "my_tasks")
    assert task_settings(json.loads((d / f"results_{D1}.json").read_text()))["settings"] == {}
    assert task_settings(json.loads((b / f"results_{D1}.json").read_text()))["settings"] == {
        "longshort_longbench_e": {"longbench_e_data_dir": "/lb", "longbench_e_hf_path": None}}


def test_a_measured_setting_at_its_default_or_on_a_task_one_run_lacks_is_no_difference(tmp_path):
    """``babilong_prompt: lm_eval`` given is the default left unset; a setting of a task only one run scored, or a
    setting that does not change the measurement (``babilong_missing``), is no difference."""
    task = "longshort_babilong_qa1"
    a = _measured(tmp_path / "a", task, {"babilong_missing": "error"})
    b = _measured(tmp_path / "b", task, {"babilong_prompt": "lm_eval"})
    build_report([a, b], tmp_path / "same")
    c = _measured(tmp_path / "c", "longshort_ppl", {"ppl_source": "stdlib"})
    f = _lm_eval_file(tmp_path / "d" / f"results_{D1}.json", tasks=("longshort_ppl", "longshort_passkey"),
                      metadata={"ppl_source": "stdlib", "passkey_depths": [50]})
    summary = build_report([c, f.parent], tmp_path / "one_ran")
    assert summary["runs"]["d"]["task_settings"]["longshort_passkey"]["passkey_depths"] == [50]
    # the passkey task's defaults (depths, seed, haystack: in its task code, not its YAML) and a text task's (split,
    # chunks_per_doc, ...) spelled out are the defaults left out: the report refused such a pair as not comparable
    passkey = {"passkey_depths": [0, 25, 50, 75, 100], "passkey_seed": 0}
    e = _measured(tmp_path / "e", "longshort_passkey", {})
    g = _measured(tmp_path / "g", "longshort_passkey", passkey)
    build_report([e, g], tmp_path / "passkey_same")
    h = _measured(tmp_path / "h", "longshort_passkey", {**passkey, "passkey_seed": 1})
    with pytest.raises(Exception, match=r"longshort_passkey's passkey_seed \(`e` 0, `h` 1\)"):
        build_report([e, h], tmp_path / "passkey_other")
    k = _measured(tmp_path / "k", "longshort_ppl", {"ppl_source": "stdlib", "ppl_split": "test",
                                                      "ppl_chunks_per_doc": 1, "ppl_join_documents": False})
    build_report([c, k], tmp_path / "ppl_same")
    # the same within one folder (tasks run one at a time into it): a task default spelled out in one results file
    # and left out in the other was "--metadata passkey_seed: (the task's default) vs 0", two runs
    one = tmp_path / "one"
    _lm_eval_file(one / f"results_{D1}.json", tasks=("longshort_passkey", "longshort_ppl"))
    _lm_eval_file(one / f"results_{D2}.json", tasks=("longshort_passkey", "longshort_ppl"),
                  metadata={**passkey, "ppl_split": "test"})
    build_report([one], tmp_path / "one_folder")
    _lm_eval_file(one / f"results_{D2}.json", tasks=("longshort_passkey",), metadata={"passkey_seed": 1})
    with pytest.raises(ValueError, match=r"--metadata passkey_seed: \"\(the task's default\)\" vs 1"):
        build_report([one], tmp_path / "one_other")
    # a list given to one file only: named, not a TypeError (unhashable list)
    _lm_eval_file(one / f"results_{D2}.json", tasks=("longshort_passkey",), metadata={"passkey_depths": [0, 50]})
    with pytest.raises(ValueError, match=r"--metadata passkey_depths: \"\(the task's default\)\" vs \[0, 50\]"):
        build_report([one], tmp_path / "one_list")
