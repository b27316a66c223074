"""A ``longshort-eval`` killed while lm-eval writes its results file (the out-of-memory killer, ``kill -9``, a crash)
leaves no ``results_<date>.json`` cut off: lm-eval writes it straight at its name, and a cut-off one made the report
refuse the folder, also after the run was evaluated again into the same ``--output_path``."""

from __future__ import annotations

import json
import signal

from bounded_child import run_bounded

from torchtune_longshort.eval.report.run_files import lm_eval_files

# The child writes a whole results file into argv[1], then one into argv[2] under a file-size limit it cannot fit
# with SIGXFSZ's default action (Python ignores it): the kernel kills the process part-way through the write, as
# SIGKILL does, with no Python left to clean up.
CHILD = """
import resource, signal, sys, types
# the run's record (provenance, torch's import): not what is tested, and slow
sys.modules["torchtune_longshort.eval.run_record"] = types.SimpleNamespace(add_run_record=lambda results: None)
from lm_eval.loggers.evaluation_tracker import EvaluationTracker
from torchtune_longshort.eval.results_written import SavedResults
results = {"results": {"t": {"x,none": 1.0}}, "configs": {"t": {"pad": "x" * 40000}}}
with SavedResults().watching():
    EvaluationTracker(output_path=sys.argv[1]).save_results_aggregated(results=dict(results), samples=None)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    EvaluationTracker(output_path=sys.argv[2]).save_results_aggregated(results=dict(results), samples=None)
"""


def test_a_results_file_cut_off_by_a_kill_is_never_left(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    p = run_bounded(CHILD, whole, killed, seconds=60, spun="the results writer ran")
    assert p.returncode == -signal.SIGXFSZ, p.stderr[-2000:]
    written = lm_eval_files(whole)
    assert len(written) == 1 and json.loads(written[0].read_text())["configs"]["t"]["pad"] == "x" * 40000
    for f in lm_eval_files(killed):  # none, or whole: never one the report refuses as not JSON
        json.loads(f.read_text())
