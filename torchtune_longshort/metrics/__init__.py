"""Metrics: long-short misalignment (paper Eq. 4)."""

from torchtune_longshort.refusals import stopped_while_importing

with stopped_while_importing(__name__):  # Ctrl-C while torch is imported (seconds): one line, exit 130
    from torchtune_longshort.metrics.misalignment import (
        DEFAULT_NUM_SAMPLES,
        MisalignmentResult,
        misalignment_metric,
        suffix_misalignment,
        summarize,
    )

__all__ = ["DEFAULT_NUM_SAMPLES", "MisalignmentResult", "misalignment_metric", "suffix_misalignment", "summarize"]
