"""The files results_written checks are the files lm-eval's own ``EvaluationTracker`` writes, for either
``--output_path`` form (a folder: ``<folder>/<model>/``; ``<name>.json``: ``<name>_<date>.json`` and the samples
beside it): a run that saved both is named by no failure line. The mutants that lose the ``.json`` form in
``results_file`` (``suffix == ".jsonl"``) and in ``samples_file`` (``path`` for ``path.parent``) survived
test_eval_results_killed.py and test_disk_full.py's samples test."""

from __future__ import annotations

from pathlib import Path

from torchtune_longshort.eval.results_written import SavedResults, results_file, samples_file


def _sample(i):
    return {"doc_id": i, "arguments": [("q", " a")], "resps": [[-1.0]], "filtered_resps": [-1.0], "target": " a"}


def test_the_files_checked_are_the_files_lm_evals_tracker_wrote(tmp_path, monkeypatch):
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker

    from torchtune_longshort.eval import run_record

    monkeypatch.setattr(run_record, "add_run_record", lambda results: None)  # no checkpoint to fingerprint here
    for out in (tmp_path / "folder", tmp_path / "named" / "res.json"):
        saved = SavedResults()
        tracker = EvaluationTracker(output_path=str(out))
        tracker.general_config_tracker.model_name_sanitized = "m"
        with saved.watching():
            tracker.save_results_aggregated(results={"results": {"t": {"acc,none": 1.0}}, "configs": {}},
                                            samples=None)
            tracker.save_results_samples("t", [_sample(i) for i in range(2)])
        root = out.parent if out.suffix == ".json" else out
        written = sorted(p for p in root.rglob("*") if p.is_file())
        assert saved.failed == [], saved.failed
        assert sorted([results_file(tracker), samples_file(tracker, "t")]) == written, (out, written)


def test_the_closing_line_names_the_results_file_in_lm_evals_hidden_folder(tmp_path, monkeypatch):
    """``--model_args pretrained=./out/step_8/ --output_path res`` wrote ``res/.__out__step_8/results_<date>.json``
    (lm-eval's own ``sanitize_model_name`` of the path, a hidden folder) and the closing line did not say where; it
    now ends naming the one file lm-eval's tracker wrote (found on disk, as a user would)."""
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker
    from lm_eval.utils import sanitize_model_name

    from torchtune_longshort.eval import run_record
    from torchtune_longshort.eval.cli_messages import summary_line

    monkeypatch.setattr(run_record, "add_run_record", lambda results: None)  # no checkpoint to fingerprint here
    monkeypatch.chdir(tmp_path)
    results = {"results": {"t": {"acc,none": 1.0}}, "configs": {}}
    saved, tracker = SavedResults(), EvaluationTracker(output_path="res")
    tracker.general_config_tracker.model_name_sanitized = sanitize_model_name("./out/step_8")  # lm-eval's own name
    with saved.watching():
        tracker.save_results_aggregated(results=results, samples=None)
    [written] = [p for p in Path("res").rglob("*") if p.is_file()]
    assert written.parent.name.startswith(".")  # hidden: `ls res` shows nothing
    assert summary_line(results, saved.results[-1]).endswith(f" scored, none unscored; results: {written}")
