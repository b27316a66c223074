"""The report's reading of lm-eval's results files, written here by lm-eval's own ``EvaluationTracker``: a metric
under a filter other than ``none`` keeps its ``,<filter>``, a stderr is no metric, lm-eval's stderr "N/A" is no number,
the newest file wins for the stderrs too, ``--predict_only`` is read from the newest file, and ``--limit`` cuts the
documents as lm-eval's ``get_sample_size`` does. The mutants ``name`` for the filtered key,
``[: -len("stderr")]``, ``reversed`` file order in ``load_stderrs`` and ``files[0]`` in ``predict_only_tasks`` survived
the report tests."""

from types import SimpleNamespace

from torchtune_longshort.eval.report.results_io import (_evaluated, load_results, load_stderrs, predict_only_tasks,
                                                        results_files)


def _saved(out, results, configs=None):
    """One results file, as lm-eval's tracker writes it for ``--output_path out``."""
    from lm_eval.loggers import EvaluationTracker

    tracker = EvaluationTracker(output_path=str(out))
    tracker.general_config_tracker.model_name_sanitized = "m"
    tracker.save_results_aggregated(results={"results": results, "configs": configs or {},
                                             "config": {"model": "hf", "model_args": "pretrained=/m"}}, samples=None)
    return results_files(out)[-1]


def test_filtered_metrics_keep_their_filter_and_stderrs_are_apart(tmp_path):
    gsm = {"alias": "gsm", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.05,
           "exact_match,flexible-extract": 0.5, "exact_match_stderr,flexible-extract": "N/A"}
    ppl = {"alias": "longshort_ppl", "ppl_256,none": 7.5, "ppl_256_stderr,none": "N/A", "acc,none": 0.75,
           "acc_stderr,none": 0.125}
    _saved(tmp_path / "out", {"gsm": gsm, "longshort_ppl": ppl})
    got = load_results(tmp_path / "out")
    assert got["gsm"] == {"exact_match,strict-match": 0.25, "exact_match,flexible-extract": 0.5}
    assert got["longshort_ppl"] == {"ppl_256": 7.5, "acc": 0.75}
    assert load_stderrs(tmp_path / "out") == {"gsm": {}, "longshort_ppl": {"acc": 0.125}}


def test_the_newest_file_gives_the_stderr_and_the_predict_only_tasks(tmp_path):
    out = tmp_path / "out"
    bypass = {"longshort_ppl": {"metric_list": [{"metric": "bypass"}]}}
    first = _saved(out, {"longshort_ppl": {"acc,none": 0.5, "acc_stderr,none": 0.25}}, bypass)
    second = _saved(out, {"longshort_ppl": {"acc,none": 0.75, "acc_stderr,none": 0.125}},
                    {"longshort_ppl": {"metric_list": [{"metric": "acc"}]}})
    assert results_files(out) == [first, second]
    assert load_stderrs(out) == {"longshort_ppl": {"acc": 0.125}}
    assert load_results(out) == {"longshort_ppl": {"acc": 0.75}}
    assert predict_only_tasks(out) == []


def test_limit_cuts_the_documents_as_lm_eval_does():
    from lm_eval.evaluator_utils import get_sample_size

    for docs in (1, 7, 40):
        task = SimpleNamespace(eval_docs=list(range(docs)))
        for limit in (None, 0.1, 0.5, 0.999, 1.0, 1, 2, 3.0, 100):
            n = get_sample_size(task, limit)
            assert _evaluated(docs, limit) == (docs if n is None else min(docs, n)), (docs, limit)
