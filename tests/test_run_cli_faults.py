"""cli_run.run_cli (longshort-eval in-process, from Python) with a user task whose process_results raises returned
its results, the task NaN, and said nothing at the end: longshort-eval's closing line ('longshort-eval: error: 1
task(s) raised and are NaN: ...', exit 1) was left out. run_cli now logs that line as an error, without the exit
status, and returns as before."""

import json
import logging
import math
import sys
import textwrap


def _boom_task(folder):
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(json.dumps({"i": i, "score": s, "text": "a", "answer": "b"}) + "\n"
                                               for i, s in enumerate([0.25, 0.5, 1.0])))
    (folder / "funcs.py").write_text(textwrap.dedent("""\
        def boom(doc, results):
            if doc["i"] == 1:
                raise RuntimeError("boom on doc 1")
            return {"acc": doc["score"]}
        """))
    (folder / "my_boom.yaml").write_text(
        f"task: my_boom\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'rows.jsonl'}\n"
        "test_split: test\noutput_type: loglikelihood\ndoc_to_text: \"{{text}}\"\ndoc_to_target: \" {{answer}}\"\n"
        "process_results: !function funcs.boom\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")


def test_run_cli_logs_longshort_evals_closing_line_for_a_task_that_raised(tmp_path, monkeypatch, capsys, caplog):
    from torchtune_longshort.eval.__main__ import main
    from torchtune_longshort.eval.cli_run import run_cli

    _boom_task(tmp_path / "mytasks")
    monkeypatch.chdir(tmp_path)
    args = ["run", "--model", "dummy", "--device", "cpu", "--include_path", "mytasks", "--tasks", "my_boom",
            "--output_path", "res"]
    with caplog.at_level(logging.ERROR):
        results = run_cli(args)
    assert math.isnan(results["results"]["my_boom"]["acc,none"])
    logged = [r.getMessage() for r in caplog.records if r.name == "torchtune_longshort.eval.cli_run"]
    capsys.readouterr()
    # the reference: longshort-eval's own last line for the same run
    monkeypatch.setattr(sys, "argv", ["longshort-eval", *args])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 1 and said.startswith("longshort-eval: error: 1 task raised and is NaN: my_boom"), said
    assert logged == [said[len("longshort-eval: error: "):].replace(" (exit status 1)", "")], (logged, said)
