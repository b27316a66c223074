"""The evaluation report: lm-eval results folders -> tables, plots and a summary (:mod:`.build`), read by
:mod:`.results_io`, drawn by :mod:`.figures`. ``python -m torchtune_longshort.eval.report`` /
``longshort-eval-report``."""

from torchtune_longshort.refusals import stopped_while_importing

with stopped_while_importing(__name__):  # Ctrl-C while torch is imported (seconds): one line, exit 130
    from torchtune_longshort.eval.report.build import build_report, main

__all__ = ["build_report", "main"]
