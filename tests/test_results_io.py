"""Finding lm-eval's files in an output folder: the folder is laid out here by hand (lm-eval's names, dates and
layouts: ``<output_path>/<model>/results_<date>.json``, ``samples_<task>_<date>.jsonl``), so the answer is known."""

import json
import os
from datetime import datetime

from torchtune_longshort.eval.report.results_io import (
    lm_eval_files,
    load_cell_counts,
    load_curves,
    load_provenance,
    load_results,
    remove_lm_eval_files,
)

OLD, NEW = "2026-11-20T08-00-00.000001", "2026-11-27T09-30-00.000002"


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in data))
    else:
        path.write_text(json.dumps(data))
    return path


def _results(ppl, prov):
    return {"results": {"longshort_ppl": {"ppl_256,none": ppl}}, "config": {"model": "hf", "provenance": prov,
                                                                           "model_args": "pretrained=/m"}}


def test_files_are_found_by_name_at_any_depth_and_ordered_by_lm_evals_date(tmp_path, monkeypatch):
    # the folder the user named results_*: a samples file there is not a results file
    out = tmp_path / "results_smollm2"
    new = _write(out / "results_" f"{NEW}.json", _results(11.0, {"run": "new"}))  # at the top of the folder
    old = _write(out / "m" / f"results_{OLD}.json", _results(12.0, {"run": "old"}))  # a model subfolder, older
    samples = [_write(out / "m" / f"samples_longshort_ppl_{d}.jsonl",
                      [{"curve_mean_nll_256": [float(i), 2.0 * i]} for i in (1, 2)] if d == NEW else
                      [{"curve_mean_nll_256": [9.0, 9.0]}]) for d in (NEW, OLD)]
    former = _write(out / "m" / f"samples_long_ppl_{OLD}.jsonl", [{"curve_mean_nll_128": [1.0, 1.0]}])
    _write(out / "m" / f"samples_longshort_passkey_{OLD}.jsonl", [{"acc_256_d50": 1.0}, {"acc_256_d50": 0.0}])
    (out / "m" / "notes_results_x.json").write_text("{}")  # not lm-eval's
    (out / "m" / "results_notes.json").write_text("{}")  # a user's: lm-eval's names end in its date

    assert lm_eval_files(out) == [old, new]
    assert lm_eval_files(out, "samples")[-1] == samples[0] and former in lm_eval_files(out, "samples")
    monkeypatch.chdir(out)  # a relative folder: results_<date>.json at the top has no '/' before it
    assert [str(f) for f in lm_eval_files(".")] == [os.path.join("m", old.name), new.name]
    assert load_results(out)["longshort_ppl"] == {"ppl_256": 11.0}  # the newest wins
    assert load_provenance(out) == {"run": "new"}
    assert load_curves(out) == {256: [1.5, 3.0], 128: [1.0, 1.0]}  # newest file per length, a former name read
    assert load_cell_counts(out) == {"longshort_passkey": {("256", 50): 2}}


def test_removing_lm_evals_files_keeps_every_other_file(tmp_path):
    """What the study deletes before it evaluates a run again: lm-eval's files only. The names are made as lm-eval's
    EvaluationTracker makes them (``datetime.now().isoformat()`` with ':' as '-'); files of other names stay."""
    date = datetime.now().isoformat().replace(":", "-")
    out = tmp_path / "eval"
    _write(out / "m" / f"results_{date}.json", _results(1.0, {}))
    _write(out / "m" / f"samples_longshort_ppl_{date}.jsonl", [{}])
    _write(out / "m2" / f"samples_longshort_passkey_{OLD}.jsonl", [{}])
    mine = [_write(out / "m" / "results.json", {}), _write(out / "notes" / "results_summary.json", {}),
            _write(out / f"results_{OLD}.json.bak", {})]
    assert remove_lm_eval_files(out) == sorted(mine)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "m", "m/results.json", "notes", "notes/results_summary.json", f"results_{OLD}.json.bak"]  # m2/ went, empty
    for p in mine:
        p.unlink()
    assert remove_lm_eval_files(out) == [] and out.is_dir()  # no file of lm-eval's: no folder goes either
    _write(out / "m" / f"results_{date}.json", _results(1.0, {}))
    assert remove_lm_eval_files(out) == [] and sorted(os.listdir(out)) == ["notes"]  # m/ (emptied) went, notes/ stays
    (out / "notes").rmdir()
    _write(out / "m" / f"results_{date}.json", _results(1.0, {}))
    assert remove_lm_eval_files(out) == [] and not out.exists()  # the folder itself, when it held lm-eval's only
