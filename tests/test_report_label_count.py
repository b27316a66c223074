"""``--labels`` names each run once (``eval.report.build.build_report``): a list shorter than the runs left the
runs past it unnamed (``zip`` stops at the shorter), a longer one named runs that are not there; both are refused
before anything is written. Hand mutation testing found it unasked: accepting fewer labels than runs passed
test_eval_report_runs and test_eval_report_faults."""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.report.build import build_report


@pytest.mark.parametrize("n_labels", [1, 2, 4])
def test_a_label_count_other_than_the_run_count_is_refused_before_any_file(tmp_path, n_labels):
    runs = [tmp_path / f"run{i}" for i in range(3)]
    for r in runs:
        r.mkdir()
    labels = [f"l{i}" for i in range(n_labels)]
    with pytest.raises(ValueError, match=rf"^labels=.* has {n_labels} names for {len(runs)} results folders"):
        build_report(runs, tmp_path / "out", labels)
    assert not (tmp_path / "out").exists()
