"""refusals.locale_codec_fix adds its hint only to an error of the locale's own, non-UTF-8 codec: in a UTF-8 locale
with Python's UTF-8 mode off (``LC_ALL=C.UTF-8 PYTHONUTF8=0``) a data file that is not UTF-8 fails in that same
codec, and its fix is the file's, not the environment's; a ``UnicodeError`` that names no codec gets no hint (and
raises nothing). References: Python's own decode error, and the locale's codec as ``locale`` reads it."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECK = """
import codecs, json, locale
from torchtune_longshort.refusals import locale_codec_fix
try:
    b"caf\\xe9".decode("utf-8")
except UnicodeDecodeError as e:
    decode = e
print(json.dumps({"codec": codecs.lookup(locale.getpreferredencoding(False)).name,
                  "decode": locale_codec_fix(decode), "bare": locale_codec_fix(UnicodeError("no codec named"))}))
"""


def _run(**env: str) -> dict:
    full = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", **env}
    done = subprocess.run([sys.executable, "-c", CHECK], env=full, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_file_not_in_utf8_read_in_a_utf8_locale_gets_no_locale_hint():
    got = _run(LANG="C.UTF-8", LC_ALL="C.UTF-8")
    assert got["codec"] == "utf-8", got  # the locale is UTF-8's: the decode failed in the locale's own codec
    assert got["decode"] == "" and got["bare"] == "", got


def test_a_unicode_error_naming_no_codec_gets_no_hint_in_an_ascii_locale():
    got = _run(LANG="C", LC_ALL="C")
    assert got["codec"] == "ascii", got
    assert got["bare"] == "", got
