"""The study report reads as the answer: it opens with each of the paper's claims and its verdict, one line each,
before the tables; the verdicts are the analysis's own (summary.json), rebuilt here from the committed results of
``docs/study/cpu_small`` (``--report-only``, as a user rebuilds a report)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from torchtune_longshort.study.__main__ import main

REPO = Path(__file__).resolve().parents[1]


def test_the_report_opens_with_every_claims_verdict(tmp_path, capsys):
    out, rep = tmp_path / "out", tmp_path / "report"
    for d in sorted((REPO / "docs/study/cpu_small/runs").iterdir()):
        dest = out / "base" if d.name == "base" else out / "runs" / d.name
        dest.mkdir(parents=True)
        shutil.copy(d / "result.json", dest / "result.json")
    rc = main(["--config", "study/cpu_small.yaml", "--out", str(out), "--report-only", "--report-dir", str(rep),
               "--repo-root", str(REPO)])
    printed = capsys.readouterr()  # every run of the config's grid is in the committed results, with its spec
    assert rc == 0 and (rep / "report.md").is_file(), printed.out[-2000:] + printed.err[-2000:]
    md = (rep / "report.md").read_text().splitlines()
    heads = [i for i, line in enumerate(md) if line.startswith("## ")]
    assert md[heads[0]] == "## The answer: the paper's claims, one line each"  # the first section, before any table
    assert md[0] == "# Study `cpu_small`" and not any("--quick" in line for line in md[:heads[1]])  # a real run's
    claims = json.loads((rep / "summary.json").read_text())["claims"]["claims"]
    rows = [line for line in md[heads[0]:heads[1]] if line.startswith("| ") and not line.startswith("| claim")]
    assert [r.split(" | ")[:2] for r in rows] == [[f"| {c['id']}", c["verdict"]] for c in claims]
    assert len(claims) >= 5
