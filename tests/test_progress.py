"""Long loops show a progress bar with its total (tqdm's ``n/total`` and ETA): the study over its runs, the
BABILong generator over its rows, the synthetic grids over their runs. (The misalignment CLI's bar:
tests/test_misalignment_default.py.)"""

from __future__ import annotations

import re

from torchtune_longshort.eval.tasks.babilong import generator as gen


def _final(err: str, desc: str) -> str:
    """The last redraw of the bar named ``desc`` in captured stderr."""
    draws = [d for d in re.split(r"[\r\n]", err) if d.startswith(desc)]
    assert draws, err[-2000:]
    return draws[-1]


def test_study_bar_over_runs(tmp_path, capsys):
    from test_study import _study

    study, _ = _study(tmp_path, methods={"pi": {"method": "linear"}}, seeds=[0])
    study.run()
    last = _final(capsys.readouterr().err, "study runs")
    n = 1 + len(study.runs())  # base + grid
    assert f"{n}/{n}" in last and "100%" in last
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", last)  # elapsed<remaining


def test_babilong_generator_bar_over_rows(tmp_path, capsys):
    gen.main(["--out", str(tmp_path / "b"), "--lengths", "0k", "--qa", "qa1,qa2", "--n", "3"])
    last = _final(capsys.readouterr().err, "babilong rows")
    assert "6/6" in last and "100%" in last  # 1 length x 2 tasks x 3 rows


def test_synthetic_grid_bar_has_total(capsys):
    from torchtune_longshort.synthetic.experiments import RunConfig, run_all

    cfgs = [RunConfig(task="mean", pe=pe, max_steps=2, eval_every=1, dim=8, num_heads=2, l_train=4, l_test=6,
                      val_size=16, test_per_length=2, batch_size=8) for pe in ("nope", "rope")]
    run_all(cfgs, workers=1)
    last = _final(capsys.readouterr().err, "runs")
    assert "2/2" in last


def test_synthetic_workers_print_no_import_noise_into_the_bar(tmp_path):
    # with --workers 2 (a full run's default) a spawned worker printed torchao's "Skipping import of cpp extensions
    # ..." line into the bar: the filters the command installs in its own process were not installed in the workers
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "torchtune_longshort.synthetic", "--figure", "1a", "--steps", "2",
                        "--seeds", "1", "--dim", "8", "--heads", "2", "--workers", "2", "--out", str(tmp_path / "o")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "torchao" not in p.stderr and "Skipping import" not in p.stderr, p.stderr[-2000:]
