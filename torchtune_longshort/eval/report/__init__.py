"""The evaluation report: lm-eval results folders -> tables, plots and a summary (:mod:`.build`), read by
:mod:`.results_io`, drawn by :mod:`.figures`. ``python -m torchtune_longshort.eval.report`` /
``longshort-eval-report``."""

from torchtune_longshort.eval.report.build import build_report, main

__all__ = ["build_report", "main"]
