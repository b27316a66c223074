"""Metrics: long-short misalignment (paper Eq. 4)."""

from torchtune_longshort.metrics.misalignment import (
    DEFAULT_NUM_SAMPLES,
    MisalignmentResult,
    misalignment_metric,
    suffix_misalignment,
    summarize,
)

__all__ = ["DEFAULT_NUM_SAMPLES", "MisalignmentResult", "misalignment_metric", "suffix_misalignment", "summarize"]
