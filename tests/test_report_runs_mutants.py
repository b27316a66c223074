"""Hand mutants of eval/report/runs.py that survived the report's tests (mutants42).

References: runs_section's, setting's, no_curve_note's and finite's docstrings read as rules on hand-made run infos
(lm-eval's n-shot 0 is its default 0-shot; a task one run lacks is no difference in how they ran; a bool is not a
number, math.isfinite for the rest)."""

from __future__ import annotations

import math

import pytest

from torchtune_longshort.eval.report.runs import finite, no_curve_note, runs_section


def _run(**over):
    info = {"model": "hf", "pretrained": None, "checkpoint_fingerprint": None, "dtype": "float32", "device": "cpu",
            "limit": None, "samples": {"longshort_ppl": 4, "arc_easy": 4}, "unscored": [], "subset": {},
            "n_shot": {}, "chat_template": [], "task_versions": {}, "task_settings": {}}
    return {**info, **over}


def test_an_explicit_zero_shot_is_the_default_zero_shot():
    # lm-eval's results carry n-shot 0 for a 0-shot task; a run that recorded none ran 0-shot too
    infos = {"a": _run(n_shot={"longshort_ppl": 0}), "b": _run()}
    table, notes = runs_section(["a", "b"], ["ra", "rb"], infos, allow_mixed=False)
    assert "†" not in table and not notes


def test_a_chat_template_on_a_task_one_run_lacks_is_no_difference():
    infos = {"a": _run(chat_template=["longshort_ppl", "arc_easy"]),
             "b": _run(samples={"longshort_ppl": 4}, chat_template=["longshort_ppl"])}
    table, notes = runs_section(["a", "b"], ["ra", "rb"], infos, allow_mixed=False)
    assert "†" not in table and not notes
    infos["b"]["chat_template"] = []  # on a task both ran: a difference, shown on the tasks both ran
    with pytest.raises(ValueError, match=r"--apply_chat_template \(`a` on \(longshort_ppl\), `b` off\)"):
        runs_section(["a", "b"], ["ra", "rb"], infos, allow_mixed=False)


@pytest.mark.parametrize("key, values, dtype_hint", [("limit", (None, 2), False), ("dtype", ("float32", "bfloat16"),
                                                                                          True)])
def test_the_dtype_hint_is_said_only_when_the_runs_differ_in_dtype(key, values, dtype_hint):
    infos = {"a": _run(**{key: values[0]}), "b": _run(**{key: values[1]})}
    with pytest.raises(ValueError) as e:
        runs_section(["a", "b"], ["ra", "rb"], infos, allow_mixed=False)
    assert ("unless --model_args dtype=float32 is given" in str(e.value)) is dtype_hint, str(e.value)


def test_an_unrecorded_dtype_or_device_is_a_question_mark():
    table, _ = runs_section(["a"], ["ra"], {"a": _run(dtype=None, device=None)}, allow_mixed=False)
    row = table.splitlines()[2].split(" | ")
    assert row[4] == "?" and row[5] == "?", row


def test_a_run_whose_model_is_not_recorded_is_told_to_log_samples(tmp_path):
    # stock lm-eval results name no model: the run lacks a samples file, not "its model (`None`) returns one sum"
    note = no_curve_note("r", {"ppl_256": 3.0}, {"model": None}, tmp_path, "longshort_ppl")
    assert note == ("No per-position loss curve for `r`: its run has no `longshort_ppl` samples file: evaluate it with "
                    "--log_samples, which writes the per-token values the curve is made of (and with the longshort "
                    "model: lm-eval's hf returns one sum per request).")


@pytest.mark.parametrize("values", [[True], [False, None, "1.0", math.nan], [math.inf, -math.inf], [], [2], [0.5]])
def test_finite_counts_numbers_only(values):
    want = any(type(v) in (int, float) and math.isfinite(v) for v in values)
    assert finite(values) is want
    assert want is (values in ([2], [0.5]))  # the cases cover both answers
