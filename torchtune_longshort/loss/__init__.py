"""Losses: divergences between next-token distributions, the two-window misalignment term, and the chunked
``ce + alpha * misalignment`` loss used by the recipe. The window geometry they use (which positions are compared)
is :mod:`torchtune_longshort.windows`."""

from torchtune_longshort.loss.divergences import (
    DEFAULT_DIVERGENCE,
    DIVERGENCES,
    divergence_fn,
    js_per_position,
    jeffreys_per_position,
    mean_divergence,
    sce_per_position,
)
from torchtune_longshort.loss.longshort_loss import (
    DEFAULT_ALPHA,
    LongShortLoss,
    LongShortLossOutput,
    restore_model_output,
)
from torchtune_longshort.loss.misalignment import misalignment_loss

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_DIVERGENCE",
    "DIVERGENCES",
    "LongShortLoss",
    "LongShortLossOutput",
    "divergence_fn",
    "jeffreys_per_position",
    "js_per_position",
    "mean_divergence",
    "misalignment_loss",
    "restore_model_output",
    "sce_per_position",
]
