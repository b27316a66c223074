"""Hand mutants of eval/report/runs.py that survived the report's tests (mutants15).

References: runs_section's, same_checkpoint's and same_checkpoint_note's docstrings read as rules and written out
in the test on hand-made run infos; os.path for one folder spelled two ways."""

from __future__ import annotations

import os

from torchtune_longshort.eval.report.runs import no_curve_note, same_checkpoint, same_checkpoint_note


def _info(pretrained, fingerprint=None):
    return {"pretrained": pretrained, "checkpoint_fingerprint": fingerprint}


def test_one_folder_spelled_two_ways_is_one_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck").mkdir()
    infos = {"a": _info("ck"), "b": _info(str(tmp_path / "ck")), "c": _info("/nowhere/x/"), "d": _info("/nowhere/x")}
    assert os.path.samefile("ck", tmp_path / "ck") and os.path.normpath("/nowhere/x/") == "/nowhere/x"
    assert sorted(map(sorted, same_checkpoint(list(infos), infos))) == [["a", "b"], ["c", "d"]]


def test_runs_of_one_folder_with_two_fingerprints_are_two_checkpoints():
    # the folder rewritten between the evaluations: a run without a fingerprint joins only where the others agree
    infos = {n: _info("/ck", f) for n, f in (("a", "f1"), ("b", "f2"), ("d", "f1"))}
    assert sorted(map(sorted, same_checkpoint(list(infos), infos))) == [["a", "d"], ["b"]]
    infos["c"] = _info("/ck")
    assert sorted(map(sorted, same_checkpoint(["a", "c"], infos))) == [["a", "c"]]


def test_the_note_names_the_content_only_when_every_run_recorded_it():
    infos = {"a": _info("/ck", "f1"), "b": _info("/ck", None)}
    note = same_checkpoint_note(["a", "b"], infos)
    assert "one content" not in note and "`b` recorded no content fingerprint" in note
    infos["b"]["checkpoint_fingerprint"] = "f1"
    assert same_checkpoint_note(["a", "b"], infos).endswith("one folder, one content (fingerprint f1).")


def test_no_curve_note_names_the_shots_it_ran(tmp_path):
    (tmp_path / "samples_longshort_ppl_2026-01-01T00-00-00.jsonl").write_text("{}\n")
    info = {"model": "longshort", "n_shot": {"longshort_ppl": 2}, "chat_template": []}
    note = no_curve_note("r", {"ppl_256": 3.0}, info, tmp_path, "longshort_ppl")
    assert "(it ran 2-shot;" in note


def _run(samples, n_shot=None, unscored=()):
    return {"model": "hf", "pretrained": None, "checkpoint_fingerprint": None, "dtype": "float32", "device": "cpu",
            "limit": None, "samples": samples, "unscored": list(unscored), "subset": {}, "n_shot": n_shot or {},
            "chat_template": [], "task_versions": {}, "task_settings": {}}


def test_a_run_that_scored_none_of_a_task_is_not_counted_against_the_others():
    from torchtune_longshort.eval.report.runs import runs_section

    # b's one placeholder row of longshort_misalignment (none scored) is no sample count to compare with a's 40
    infos = {"a": _run({"longshort_misalignment": 40}), "b": _run({"longshort_misalignment": 1},
                                                                  unscored=["longshort_misalignment"])}
    table, notes = runs_section(["a", "b"], ["ra", "rb"], infos, allow_mixed=False)
    assert "(none scored)" in table and not any("Unequal" in n for n in notes)


def test_the_n_shot_of_a_task_one_run_lacks_is_no_difference():
    from torchtune_longshort.eval.report.runs import runs_section

    infos = {"a": _run({"longshort_ppl": 4, "arc_easy": 4}, n_shot={"longshort_ppl": 0, "arc_easy": 5}),
             "b": _run({"longshort_ppl": 4}, n_shot={"longshort_ppl": 0})}
    table, notes = runs_section(["a", "b"], ["ra", "rb"], infos, allow_mixed=False)
    assert "†" not in table and not notes
