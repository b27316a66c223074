"""Hand mutants of eval/report/one_run.py, run_files.py and results_io.py that survived the report's tests (mutants15).

References: one checkpoint folder spelled two ways (os.path.normpath of both the same folder), and check_one_run's
docstring (fingerprints compared only where both files have one: stock lm-eval's results record none)."""

from __future__ import annotations

import json
import os

from torchtune_longshort.eval.report.results_io import load_results, load_run_info

D1, D2 = "2026-12-02T06-24-30.467032", "2026-12-02T06-24-38.187160"


def _results(path, pretrained="/ckpt/a", fingerprint=None, ppl=3.0, task="longshort_ppl"):
    config = {"model": "hf", "model_args": {"pretrained": pretrained}, "limit": None, "device": "cpu"}
    if fingerprint:
        config["checkpoint_fingerprint"] = fingerprint
    data = {"results": {task: {"ppl_256,none": ppl}}, "configs": {task: {"metadata": {}}},
            "n-shot": {task: 0}, "n-samples": {task: {"original": 2, "effective": 2}}, "config": config}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_one_checkpoint_folder_spelled_with_a_trailing_slash_is_one_run(tmp_path):
    # shell completion writes pretrained=/ckpt/a/; the next evaluation into the same --output_path spells it /ckpt/a
    assert os.path.normpath("/ckpt/a/") == os.path.normpath("/ckpt/a")
    run = tmp_path / "run"
    _results(run / "m" / f"results_{D1}.json", pretrained="/ckpt/a/", ppl=3.0)
    _results(run / "m" / f"results_{D2}.json", pretrained="/ckpt/a", ppl=4.0, task="longshort_passkey")
    assert load_results(run) == {"longshort_ppl": {"ppl_256": 3.0}, "longshort_passkey": {"ppl_256": 4.0}}
    assert load_run_info(run)["pretrained"] == "/ckpt/a"


def test_a_stock_lm_eval_file_beside_one_with_a_fingerprint_is_one_run(tmp_path):
    # the older file (stock lm_eval) records no fingerprint, the newer (longshort-eval) one: nothing to compare
    run = tmp_path / "run"
    _results(run / "m" / f"results_{D1}.json", fingerprint=None, ppl=3.0)
    _results(run / "m" / f"results_{D2}.json", fingerprint="abc", ppl=4.0, task="longshort_passkey")
    assert set(load_results(run)) == {"longshort_ppl", "longshort_passkey"}
    assert load_run_info(run)["checkpoint_fingerprint"] == "abc"


def test_a_pack_task_file_beside_a_file_of_other_tasks_only_is_one_run(tmp_path):
    # n-shot is compared on the tasks both files scored, else on the pack's tasks of both: a file of lm-eval's own
    # task (arc_easy, 0-shot) has no pack task to compare with the other's longshort_ppl
    run = tmp_path / "run"
    _results(run / "m" / f"results_{D1}.json", task="longshort_ppl")
    _results(run / "m" / f"results_{D2}.json", task="arc_easy")
    assert set(load_results(run)) == {"longshort_ppl", "arc_easy"}


def test_a_task_the_file_holds_no_results_of_has_no_measured_settings():
    from torchtune_longshort.eval.report.one_run import task_settings

    # lm-eval's configs can name a task whose results are not in the file (a group's member it did not score):
    # what the run measured are the settings of the tasks it scored
    data = {"results": {"longshort_ppl": {"ppl_256,none": 3.0}},
            "configs": {"longshort_ppl": {"metadata": {}}, "longshort_passkey": {"metadata": {"passkey_seed": 7}}}}
    assert set(task_settings(data)["settings"]) == {"longshort_ppl"}


def test_a_results_date_file_is_labelled_by_its_folder_a_named_one_by_its_name(tmp_path):
    from torchtune_longshort.eval.report.run_files import run_label

    # lm-eval's --output_path out/ writes out/<model>/results_<date>.json; --output_path out/res.json: res_<date>.json
    _results(tmp_path / "ckpt_a" / f"results_{D1}.json")
    _results(tmp_path / "out" / f"res_{D1}.json")
    assert run_label(tmp_path / "ckpt_a" / f"results_{D1}.json") == "ckpt_a"
    assert run_label(tmp_path / "out" / f"res_{D1}.json") == "res"


def test_a_users_dated_json_with_a_results_dict_is_not_lm_evals(tmp_path):
    from torchtune_longshort.eval.report.run_files import is_results_file

    # lm-eval's EvaluationTracker writes results beside configs / versions / n-shot / n-samples / config
    mine = tmp_path / f"notes_{D1}.json"
    mine.write_text(json.dumps({"results": {"ppl": {"256": 3.0}}, "notes": "mine"}))
    theirs = tmp_path / f"res_{D2}.json"
    _results(theirs)
    assert not is_results_file(mine) and is_results_file(theirs)


def test_the_newest_file_wins_whatever_its_name(tmp_path):
    # one run evaluated twice into one folder under two --output_path names: b_<older>.json, then a_<newer>.json
    assert D1 < D2
    _results(tmp_path / "run" / f"b_{D1}.json", ppl=3.0)
    _results(tmp_path / "run" / f"a_{D2}.json", ppl=4.0)
    assert load_results(tmp_path / "run") == {"longshort_ppl": {"ppl_256": 4.0}}


def test_samples_under_a_fractional_limit_are_counted_as_lm_eval_cuts_them(tmp_path):
    from types import SimpleNamespace

    from lm_eval.evaluator_utils import get_sample_size

    for docs, limit in ((10, 0.3), (7, 0.5), (3, 0.1)):
        run = tmp_path / f"r{docs}"
        _results(run / "m" / f"results_{D1}.json")
        data = json.loads((run / "m" / f"results_{D1}.json").read_text())
        data["config"]["limit"] = limit
        data["n-samples"]["longshort_ppl"] = {"original": docs, "effective": docs}
        (run / "m" / f"results_{D1}.json").write_text(json.dumps(data))
        want = get_sample_size(SimpleNamespace(eval_docs=[None] * docs), limit)
        assert load_run_info(run)["samples"] == {"longshort_ppl": want}, (docs, limit, want)


def test_a_device_is_corrected_only_where_it_names_cuda():
    from torchtune_longshort.eval.report.results_io import ran_on

    env = "PyTorch version: 2.5\nIs CUDA available: False\n"
    assert ran_on("cuda:0", env) == "cpu (recorded as cuda:0; CUDA was not available)"
    assert ran_on("mps", env) == "mps" and ran_on("cpu", env) == "cpu"


def test_a_samples_file_holding_every_document_is_no_subset(tmp_path):
    # ppl's effective counts the documents of one length (1 here, of 4); its samples file holds all 4 doc_ids
    run = tmp_path / "run"
    _results(run / "m" / f"results_{D1}.json")
    data = json.loads((run / "m" / f"results_{D1}.json").read_text())
    data["n-samples"]["longshort_ppl"] = {"original": 4, "effective": 1}
    (run / "m" / f"results_{D1}.json").write_text(json.dumps(data))
    rows = [{"doc_id": i} for i in range(4)]
    (run / "m" / f"samples_longshort_ppl_{D1}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = load_run_info(run)
    assert info["subset"] == {} and info["samples"] == {"longshort_ppl": 4}


def test_a_samples_file_one_row_short_is_named_cut_off(tmp_path):
    from torchtune_longshort.eval.report.results_io import cut_off_samples

    run = tmp_path / "run"
    _results(run / "m" / f"results_{D1}.json")
    path = run / "m" / f"samples_longshort_ppl_{D1}.jsonl"
    for rows, want in ((3, [f"{path} (3 of 4 samples)"]), (4, [])):
        path.write_text("".join(json.dumps({"doc_id": i}) + "\n" for i in range(rows)))
        assert cut_off_samples(run, {"longshort_ppl": 4}) == want


def test_a_task_whose_every_sample_is_counted_not_scored_is_unscored(tmp_path):
    for not_scored, unscored in (({"no data": 2}, ["longshort_ppl"]), ({"no data": 1}, [])):
        run = tmp_path / f"r{len(unscored)}"
        _results(run / "m" / f"results_{D1}.json")  # 2 samples
        data = json.loads((run / "m" / f"results_{D1}.json").read_text())
        data["configs"]["longshort_ppl"]["not_scored"] = not_scored
        (run / "m" / f"results_{D1}.json").write_text(json.dumps(data))
        assert load_run_info(run)["unscored"] == unscored
