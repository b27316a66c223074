"""The synthetic ``--lrs`` search with a rate that diverges: it is recorded as diverged (runs.json, summary.json, the
printed table) and the search goes on with the other rates; the command fails, in one line naming the rates, only when
every rate diverges. Before, the first diverging rate ended the whole search (exit 2, nothing written)."""

from __future__ import annotations

import csv
import json

import pytest

from torchtune_longshort.synthetic.__main__ import main
from torchtune_longshort.synthetic.train import Diverged, RunConfig, train_run

PREFIX = "python -m torchtune_longshort.synthetic: error: "
# figure 1b at its smallest: 4 curves x 1 seed, a few seconds a run; 1e30 leaves the finite numbers at step 2
TINY = ["--figure", "1b", "--quick", "--seeds", "1", "--steps", "5", "--dim", "8", "--heads", "2"]
HUGE = 1e30


def test_a_diverging_rate_is_recorded_and_the_search_goes_on(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(TINY + ["--lrs", f"1e-3,{HUGE:g}", "--out", str(out)]) == 0, capsys.readouterr().err[-3000:]
    printed = capsys.readouterr().out.splitlines()
    runs = json.loads((out / "runs.json").read_text())
    diverged = [r for r in runs if "diverged" in r]
    kept = {r["config"]["pe"]: r for r in runs if "diverged" not in r}
    assert len(runs) == 8 and len(kept) == 4 and {r["config"]["lr"] for r in diverged} == {HUGE}
    assert all(r["best_val_mse"] is None and 1 <= r["diverged"]["step"] <= 5 for r in diverged)
    assert all(r["config"]["lr"] == 1e-3 and r["best_val_mse"] > 0 for r in kept.values())
    # the huge rate diverges on its own too (the record is not an artefact of the search)
    with pytest.raises(Diverged, match=f"training diverged at step {diverged[0]['steps']}: "):
        train_run(RunConfig(**diverged[0]["config"]))
    summary = json.loads((out / "summary.json").read_text())
    choices = summary["meta"]["lr_choice"]
    assert len(choices) == 4 and all(ch["chosen"] == 1e-3 for ch in choices.values())
    assert all(ch["val_mse"][str(HUGE)] is None and ch["diverged"][str(HUGE)] >= 1 for ch in choices.values())
    assert sum("diverged" in r for r in summary["meta"]["runs"]) == 4
    # the printed table: a row per curve, the huge rate shown diverged, the kept rate marked
    rows = [x for x in printed if x.startswith("  1b: ")]
    assert len(rows) == 4 and all("lr 1e+30: diverged at step " in x and "lr 0.001: " in x for x in rows), printed
    assert all(x.split("lr 0.001: ")[1].split(" |")[0].endswith("*") for x in rows), rows
    # the figure holds the kept (1e-3) runs' errors
    with open(out / "fig1b.csv") as fh:
        csv_rows = list(csv.DictReader(fh))
    labels = {"NoPE": "nope", "learned abs.": "learned", "ALiBi": "alibi", "RoPE": "rope"}
    for row in csv_rows:
        pe = next(v for k, v in labels.items() if row["curve"].startswith(k))
        want = kept[pe]["test_mse"][int(row["length"]) - 1]
        assert float(row["test_mse"]) == pytest.approx(want, rel=1e-5), row


def test_the_command_fails_only_when_every_rate_diverges(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(TINY + ["--lrs", f"1e29,{HUGE:g}", "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    err = err[err.index(PREFIX):] if PREFIX in err else err  # after what the progress bar's close wrote
    assert err.startswith(PREFIX + "training diverged at every learning rate of --lrs for figure 1b"), err
    assert "lr=1e+29 at step " in err and "lr=1e+30 at step " in err and "use smaller --lrs values" in err, err
    assert not out.exists()
