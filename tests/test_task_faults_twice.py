"""A Python caller evaluating twice inside one ``contained()`` (two lm_eval.simple_evaluate calls): a task that
raised in the first call was NaN in the second with the first call's reason, without its process_results running
(TaskFaults kept its faults across evaluate calls); each call's tasks now run afresh, the earlier fault still in the
closing line."""

import json
import textwrap


def _flaky_task(folder, broken):
    """Task ``my_flaky``: its process_results raises while the file ``broken`` exists."""
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(
        json.dumps({"i": i, "score": s, "text": "a", "answer": "b"}) + "\n" for i, s in enumerate([0.25, 0.5, 1.0])))
    (folder / "funcs.py").write_text(textwrap.dedent(f"""\
        import os

        def flaky(doc, results):
            if os.path.exists({str(broken)!r}):
                raise RuntimeError("broken file present")
            return {{"acc": doc["score"]}}
        """))
    (folder / "my_flaky.yaml").write_text(
        f"task: my_flaky\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'rows.jsonl'}\n"
        "test_split: test\noutput_type: loglikelihood\ndoc_to_text: \"{{text}}\"\ndoc_to_target: \" {{answer}}\"\n"
        "process_results: !function funcs.flaky\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")


def test_a_task_that_raised_in_an_earlier_evaluate_call_runs_again(tmp_path):
    import math

    import lm_eval
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval.task_faults import contained

    broken = tmp_path / "broken"
    _flaky_task(tmp_path / "mytasks", broken)
    manager = TaskManager(include_path=str(tmp_path / "mytasks"), include_defaults=False)  # no index of lm-eval's

    def evaluate():
        return lm_eval.simple_evaluate(model="dummy", tasks=["my_flaky"], task_manager=manager)

    broken.write_text("")
    with contained() as faults:
        first = evaluate()
        broken.unlink()
        second = evaluate()
    assert math.isnan(first["results"]["my_flaky"]["acc,none"])
    assert "broken file present" in str(first["configs"]["my_flaky"]["not_scored"])
    assert math.isclose(second["results"]["my_flaky"]["acc,none"], (0.25 + 0.5 + 1.0) / 3)  # the rows' mean
    assert "not_scored" not in second["configs"]["my_flaky"]
    assert "my_flaky: scoring doc 0: RuntimeError: broken file present" in faults.closing_line()
