"""One task that raises does not sink a longshort-eval run (torchtune_longshort.eval.task_faults).

Walked: `longshort-eval run ... --include_path mytasks --tasks my_boom,longshort_ppl` with my_boom's process_results
raising on doc 1 ended in a traceback, exit 1, no results file: longshort_ppl's scores lost. The tasks here are tiny
user tasks under lm-eval's `dummy` model; each scores a number read from its own rows (``score``), so the reference
is the rows' mean, computed here, whatever the model answers.
"""

import json
import sys
import textwrap

import pytest

ROWS = [{"i": i, "score": s, "text": "a", "answer": "b"} for i, s in enumerate([0.25, 0.5, 1.0])]


def _user_tasks(folder, boom_at: dict):
    """Task ``my_ok`` and, for each ``stage: source`` of ``boom_at``, a task ``my_<stage>`` raising there."""
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (folder / "funcs.py").write_text(textwrap.dedent("""\
        def ok(doc, results):
            return {"acc": doc["score"]}

        def boom(doc, results):
            if doc["i"] == 1:
                raise RuntimeError("boom on doc 1\\nsecond line")
            return {"acc": doc["score"]}

        def text_boom(doc):
            if doc["i"] == 2:
                raise KeyError("no field")
            return doc["text"]

        def mean_boom(items):
            raise ZeroDivisionError("agg went wrong")
        """))
    for name, extra in {"ok": "process_results: !function funcs.ok\n", **boom_at}.items():
        (folder / f"my_{name}.yaml").write_text(
            f"task: my_{name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'rows.jsonl'}\n"
            "test_split: test\noutput_type: loglikelihood\ndoc_to_text: \"{{text}}\"\ndoc_to_target: \" {{answer}}\"\n"
            + extra + "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")


def _run(tmp_path, monkeypatch, tasks, capsys, caplog, model="dummy"):
    from torchtune_longshort.eval.__main__ import main
    from torchtune_longshort.eval.report.run_files import results_files

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run", "--model", model, "--device", "cpu",
                                      "--include_path", "mytasks", "--tasks", ",".join(tasks),
                                      "--output_path", "res", "--log_samples"])
    code = 0  # a run with nothing to say returns
    try:
        main()
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err + "".join(r.getMessage() + "\n" for r in caplog.records)  # pytest takes the log
    return code, err, json.loads(results_files(tmp_path / "res")[-1].read_text())


def test_a_task_that_raises_is_nan_with_its_reason_and_the_others_are_scored(tmp_path, monkeypatch, capsys, caplog):
    """One run, the tasks side by side: one that scores, a few-shot one that scores, and one raising at each stage.

    A few-shot task: lm-eval builds its context with ``doc_to_target(doc, fewshot_cfg.doc_to_target)``: the wrap takes
    both (walked: every BABILong task, 2-shot, under longshort-eval ended NaN, 'building requests: TypeError:
    TaskFaults._wrap_task.<locals>.doc_to_target() takes 1 positional argument but 2 were given', exit 1).
    A filter that raises leaves every document unscored, as a task raising while building its requests does
    (walked: 'my_filt: filtering the responses: RuntimeError: filter broke': 1, and lm-eval's n-samples 'effective':
    1, of 3 documents: lm-eval was given one stand-in document to score)."""
    _user_tasks(tmp_path / "mytasks", {
        "boom": "process_results: !function funcs.boom\n",  # scoring doc 1
        "build": "process_results: !function funcs.ok\n",  # building requests (doc_to_text below)
        "agg": "process_results: !function funcs.ok\n",  # aggregation
        # the pack's own task class, with a bug planted below
        "pack": "class: !function torchtune_longshort.eval.tasks.common.pack_task.PackTask\n"
                "process_results: !function funcs.ok\n",
        "shots": "process_results: !function funcs.ok\nnum_fewshot: 1\nfewshot_split: test\n",
        "filt": "process_results: !function funcs.ok\nfilter_list:\n  - name: f1\n"
                "    filter:\n      - function: !function funcs.BadFilter\n",
    })
    funcs = tmp_path / "mytasks" / "funcs.py"
    funcs.write_text(funcs.read_text() + "\nfrom lm_eval.api.filter import Filter\n\n\nclass BadFilter(Filter):\n"
                     "    def apply(self, resps, docs):\n        raise RuntimeError('filter broke')\n")
    from torchtune_longshort.eval.tasks.common.pack_task import PackTask

    def planted(self, key):
        raise AttributeError("'PackTask' object has no attribute '_planted'")

    monkeypatch.setattr(PackTask, "add_metric", planted)
    for name, change in (("build", ("doc_to_text: \"{{text}}\"", "doc_to_text: !function funcs.text_boom")),
                         ("agg", ("aggregation: mean", "aggregation: !function funcs.mean_boom"))):
        path = tmp_path / "mytasks" / f"my_{name}.yaml"
        path.write_text(path.read_text().replace(*change))
    tasks = ["my_ok", "my_boom", "my_build", "my_agg", "my_pack", "my_shots", "my_filt"]
    code, err, results = _run(tmp_path, monkeypatch, tasks, capsys, caplog)
    reference = sum(r["score"] for r in ROWS) / len(ROWS)
    assert code == 1
    for task in ("my_ok", "my_shots"):
        assert results["results"][task]["acc,none"] == pytest.approx(reference)
        assert "not_scored" not in results["configs"][task]
    assert results["n-shot"]["my_shots"] == 1
    said = {
        "my_boom": "my_boom: scoring doc 1: RuntimeError: boom on doc 1",
        "my_build": "my_build: building requests: KeyError: 'no field'",
        "my_agg": "my_agg: aggregation: ZeroDivisionError: agg went wrong",
        "my_pack": "my_pack: scoring doc 0: AttributeError: 'PackTask' object has no attribute '_planted'",
    }
    for task, reason in said.items():
        assert results["results"][task]["acc,none"] != results["results"][task]["acc,none"]  # NaN
        assert results["configs"][task]["not_scored"] == {reason: len(ROWS)}
        assert err.count(reason) == 2, err  # logged once, and in the closing line
    filt = "my_filt: filtering the responses: RuntimeError: filter broke"
    assert results["configs"]["my_filt"]["not_scored"] == {filt: len(ROWS)}
    assert results["n-samples"]["my_filt"] == {"original": len(ROWS), "effective": len(ROWS)}
    assert results["results"]["my_filt"]["acc,f1"] != results["results"]["my_filt"]["acc,f1"]  # NaN
    assert "second line" not in err and "Traceback" not in err
    last = [line for line in err.splitlines() if line.startswith("longshort-eval: error:")][-1]
    assert last.startswith("longshort-eval: error: 5 tasks raised and are NaN: ") and "exit status 1" in last
    assert all(reason in last for reason in [*said.values(), filt])


def test_a_generate_until_task_raising_while_building_runs_under_a_model_without_loglikelihood(
        tmp_path, monkeypatch, capsys, caplog):
    """The stand-in request of a task that raised while building its own is of the task's type: a generate_until
    task under a model that only generates (a chat API: lm-eval's local-chat-completions raises NotImplementedError
    for loglikelihood) leaves the model no loglikelihood call (with a loglikelihood stand-in the run ended in that
    NotImplementedError's traceback, the other task's score lost). The model answers every request with the rows'
    answer: the reference for the task that builds is exact_match 1.0."""
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model

    class GenerateOnly(LM):
        def __init__(self, **kwargs):
            super().__init__()

        def loglikelihood(self, requests):
            raise NotImplementedError("loglikelihood is not supported by this model")

        loglikelihood_rolling = loglikelihood

        def generate_until(self, requests):
            return [ROWS[0]["answer"] for _ in requests]

    register_model("longshort_test_generate_only")(GenerateOnly)
    generate = ("output_type: generate_until\ngeneration_kwargs:\n  until: [\"\\n\"]\n"
                "metric_list:\n  - metric: exact_match\n")
    _user_tasks(tmp_path / "mytasks", {"gen": "", "genbuild": ""})
    for name, text in (("gen", "\"{{text}}\""), ("genbuild", "!function funcs.text_boom")):
        path = tmp_path / "mytasks" / f"my_{name}.yaml"
        head = path.read_text().split("output_type:")[0]
        path.write_text(head + f"doc_to_text: {text}\ndoc_to_target: \"{{{{answer}}}}\"\n" + generate
                        + "    aggregation: mean\n    higher_is_better: true\n")
    code, err, results = _run(tmp_path, monkeypatch, ["my_gen", "my_genbuild"], capsys, caplog,
                              model="longshort_test_generate_only")
    assert code == 1, err
    assert "NotImplementedError" not in err and "Traceback" not in err
    assert results["results"]["my_gen"]["exact_match,none"] == 1.0
    reason = "my_genbuild: building requests: KeyError: 'no field'"
    assert results["configs"]["my_genbuild"]["not_scored"] == {reason: len(ROWS)}
    assert results["results"]["my_genbuild"]["exact_match,none"] != results["results"]["my_genbuild"][
        "exact_match,none"]  # NaN
    last = [line for line in err.splitlines() if line.startswith("longshort-eval: error:")][-1]
    assert last.startswith("longshort-eval: error: 1 task raised and is NaN: " + reason), last
