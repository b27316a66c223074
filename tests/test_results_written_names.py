"""The files results_written checks are the files lm-eval's own ``EvaluationTracker`` writes, for either
``--output_path`` form (a folder: ``<folder>/<model>/``; ``<name>.json``: ``<name>_<date>.json`` and the samples
beside it): a run that saved both is named by no failure line. The mutants that lose the ``.json`` form in
``results_file`` (``suffix == ".jsonl"``) and in ``samples_file`` (``path`` for ``path.parent``) survived
test_eval_results_killed.py and test_disk_full.py's samples test."""

from __future__ import annotations

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
