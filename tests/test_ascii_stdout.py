"""A stdout that cannot encode every character (PYTHONIOENCODING=ascii; a non-UTF-8 locale with Python's UTF-8 mode
off) gets the commands' text with such characters escaped, as Python's own stderr writes them: the eval report's
dashes ended longshort-eval-report in a UnicodeEncodeError traceback (exit 1) after its files were written, and
lm-eval's table arrow ended longshort-eval with exit 2 after the results were saved."""

import io
import sys

from report_runs import lm_eval_run

from torchtune_longshort.eval.report import main


def test_the_report_prints_whole_to_an_ascii_stdout(tmp_path, monkeypatch):
    runs = [str(lm_eval_run(tmp_path / name, 4, pretrained=f"/ckpt/{name}")) for name in ("a", "b")]
    runs.append(str(lm_eval_run(tmp_path / "c", 4, pretrained="/ckpt/c", name="longshort_passkey")))
    raw = io.BytesIO()
    ascii_stdout = io.TextIOWrapper(raw, encoding="ascii", errors="strict")  # as PYTHONIOENCODING=ascii opens it
    monkeypatch.setattr(sys, "stdout", ascii_stdout)
    main([*runs, "--out", str(tmp_path / "r")])
    ascii_stdout.flush()
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert not md.isascii()  # what this test is about: a report with characters ASCII lacks (its dashes)
    # the reference: Python's own escaping of the same text (its stderr's error handler)
    printed = raw.getvalue()
    assert printed.startswith(md.encode("ascii", "backslashreplace")), printed[:300]
    assert printed.rstrip().splitlines()[-1].startswith(b"wrote: ")
