"""With no usable matplotlib folder (HOME a read-only or missing folder, MPLCONFIGDIR unset), every report printed
matplotlib's two lines ("mkdir -p failed for path .../matplotlib: ..." and "Matplotlib created a temporary cache
directory at /tmp/matplotlib-... because there was an issue with the default path ...") before its own output. The
drawing commands' quiet_upstream (longshort-eval-report's now too) filters those two; matplotlib removes its
temporary folder at exit. Reference: matplotlib's own import under the same environment, which prints them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUIET = "from torchtune_longshort._quiet import quiet_upstream; quiet_upstream(); "


def _import_matplotlib(tmp_path, first: str, **env):
    home = tmp_path / "home"
    home.write_text("a file: no folder can be made under it, whoever runs the test (root too)")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("MPLCONFIGDIR", "XDG_"))}
    e.update(HOME=str(home), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(REPO), LONGSHORT_TEST_FRESH="1", **env)
    return subprocess.run([sys.executable, "-c", first + "import matplotlib.figure"], env=e, capture_output=True,
                          text=True, timeout=60).stderr


def test_no_usable_home_no_matplotlib_lines_and_no_folder_left(tmp_path):
    assert "Matplotlib created a temporary cache directory" in _import_matplotlib(tmp_path, "")  # the case is real
    assert _import_matplotlib(tmp_path, QUIET) == ""
    assert list((tmp_path / "tmp").iterdir()) == []  # matplotlib's temporary folders went at exit


def test_a_user_s_unusable_mplconfigdir_is_still_reported(tmp_path):
    err = _import_matplotlib(tmp_path, QUIET, MPLCONFIGDIR=str(tmp_path / "home" / "mpl"))
    assert f"issue with MPLCONFIGDIR ({tmp_path / 'home' / 'mpl'})" in err, err


def test_a_user_s_mplconfigdir_named_matplotlib_is_reported_whole(tmp_path):
    # MPLCONFIGDIR=<unusable>/matplotlib: its "mkdir -p failed for path .../matplotlib: ..." line (the reason) was
    # taken for matplotlib's default folder and dropped. The reference: matplotlib's own lines, unfiltered.
    mine = str(tmp_path / "home" / "matplotlib")
    theirs = [line for line in _import_matplotlib(tmp_path, "", MPLCONFIGDIR=mine).splitlines()
              if "Matplotlib created a temporary" not in line]  # its temporary folder's name differs each run
    assert any(line.startswith(f"mkdir -p failed for path {mine}: ") for line in theirs), theirs
    ours = _import_matplotlib(tmp_path, QUIET, MPLCONFIGDIR=mine).splitlines()
    assert [line for line in ours if "Matplotlib created a temporary" not in line] == theirs, ours


def test_the_eval_report_quiets_upstream_before_it_draws(monkeypatch, tmp_path):
    from torchtune_longshort.eval.report import build

    called = []
    monkeypatch.setattr(build, "quiet_upstream", lambda: called.append(True))
    monkeypatch.setattr(build, "build_report", lambda *a, **k: {"files": []})
    (tmp_path / "report.md").write_text("")
    build.main([str(tmp_path), "--out", str(tmp_path)])
    assert called == [True]
