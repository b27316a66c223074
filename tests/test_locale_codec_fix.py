"""An ASCII locale with Python's UTF-8 mode off (``LC_ALL=C PYTHONUTF8=0``): code that reads text without naming an
encoding (torch's inductor, on every import of torchtune) fails in the locale's codec, and the commands' one line said
only "'ascii' codec can't decode byte 0xe2 in position 602: ordinal not in range(128)". It now names the environment
and its fix; a fault of the input's own encoding (a data file that is not UTF-8) keeps its line as it was."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ASCII_ENV = {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
READ = ("import sys; from torchtune_longshort.refusals import refusing; "
        "print(refusing('prog', lambda: {how}), end='')")


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **ASCII_ENV, "PYTHONPATH": str(REPO), **env}
    full.pop("LONGSHORT_TRACEBACK", None)
    return subprocess.run([sys.executable, "-c", code], env=full, cwd=REPO, capture_output=True, timeout=60)


def test_a_read_in_the_ascii_locale_names_the_fix_and_the_fix_works(tmp_path):
    text = tmp_path / "dash.txt"
    text.write_bytes("a dash \u2014 here".encode("utf-8"))
    code = READ.format(how=f"open({str(text)!r}).read()")
    done = _run(code)
    err = done.stderr.decode("ascii", "backslashreplace").strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("prog: error: 'ascii' codec can't decode byte 0xe2"), err
    assert "PYTHONUTF8=1" in err and "LC_ALL=C.UTF-8" in err, err
    # the reference: Python itself reads the file under each fix the line names
    for fix in ({"PYTHONUTF8": "1"}, {"LC_ALL": "C.UTF-8"}):
        fixed = _run(code, **fix)
        assert fixed.returncode == 0 and fixed.stdout.decode("utf-8") == "a dash \u2014 here", (fix, fixed.stderr)


def test_a_file_in_another_encoding_keeps_its_own_line(tmp_path):
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\u00e9".encode("latin-1"))
    done = _run(READ.format(how=f"open({str(latin)!r}, encoding='utf-8').read()"))
    err = done.stderr.decode("ascii", "backslashreplace").strip()
    # the reference: Python's own message for that decode, the whole line after the program's name
    try:
        latin.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        expected = str(e)
    assert done.returncode == 2 and err == f"prog: error: {expected}", err


def test_a_codec_python_does_not_know_keeps_its_own_line():
    # a UnicodeError may carry any codec name (a library's own): looking it up raised LookupError inside the error's
    # handling, and the command ended in a traceback ("LookupError: unknown encoding: x-no-such-codec")
    made = "UnicodeDecodeError('x-no-such-codec', b'\\xe2', 0, 1, 'not in its table')"
    done = _run(READ.format(how=f"(_ for _ in ()).throw({made})"))
    err = done.stderr.decode("ascii", "backslashreplace").strip()
    try:  # the reference: Python's own codec registry knows no such codec, and its own message for that error
        import codecs
        codecs.lookup("x-no-such-codec")
    except LookupError:
        pass
    else:
        raise AssertionError("x-no-such-codec is a codec here")
    expected = str(UnicodeDecodeError("x-no-such-codec", b"\xe2", 0, 1, "not in its table"))
    assert done.returncode == 2 and err == f"prog: error: {expected}", err
