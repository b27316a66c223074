"""A write in an ASCII locale with Python's UTF-8 mode off (``LC_ALL=C PYTHONUTF8=0``), text written to a file opened
without naming an encoding, fails with a UnicodeEncodeError of the locale's codec: its one line names the same fix as
a read's (refusals.locale_codec_fix takes any UnicodeError, not decode errors only). The reference: Python itself
writes the file under each fix the line names."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ASCII_ENV = {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
WRITE = ("from torchtune_longshort.refusals import refusing; "
         "refusing('prog', lambda: open({path!r}, 'w').write('a dash \\u2014 here'))")


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **ASCII_ENV, "PYTHONPATH": str(REPO), **env}
    full.pop("LONGSHORT_TRACEBACK", None)
    return subprocess.run([sys.executable, "-c", code], env=full, cwd=REPO, capture_output=True, timeout=60)


def test_a_write_in_the_ascii_locale_names_the_fix_and_the_fix_works(tmp_path):
    code = WRITE.format(path=str(tmp_path / "dash.txt"))
    done = _run(code)
    err = done.stderr.decode("ascii", "backslashreplace").strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("prog: error: 'ascii' codec can't encode character '\\u2014'"), err
    assert "PYTHONUTF8=1" in err and "LC_ALL=C.UTF-8" in err, err
    for fix in ({"PYTHONUTF8": "1"}, {"LC_ALL": "C.UTF-8"}):
        fixed = _run(code, **fix)
        assert fixed.returncode == 0, (fix, fixed.stderr)
        assert (tmp_path / "dash.txt").read_text(encoding="utf-8") == "a dash \u2014 here", fix
