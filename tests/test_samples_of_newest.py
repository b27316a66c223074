"""``samples_of`` reads the newest ``samples_<task>_<date>.jsonl`` of an ``--output_path`` (a folder evaluated twice
holds both runs' files), the one lm-eval's own ``get_latest_filename`` picks. Hand mutation testing found it
unasked: reading the oldest passed every test of ``eval/report/run_files.py``."""

from __future__ import annotations

import json

from lm_eval.utils import get_latest_filename

from torchtune_longshort.eval.report.run_files import samples_of

TASK = "longshort_passkey"
DATES = ["2026-03-01T10-00-00.000002", "2025-12-31T23-59-59.999999", "2026-03-01T09-59-59.500000"]


def test_the_newest_samples_file_is_read_as_lm_eval_picks_it(tmp_path):
    names = []
    for date in DATES:  # written in no date order: the last written is not the newest
        f = tmp_path / "model" / f"samples_{TASK}_{date}.jsonl"
        f.parent.mkdir(exist_ok=True)
        f.write_text(json.dumps({"doc_id": 0, "date": date}) + "\n")
        names.append(f.name)
    newest = get_latest_filename(names)
    assert [r["date"] for r in samples_of(tmp_path, TASK)] == [newest.removeprefix(f"samples_{TASK}_")[:-6]]
