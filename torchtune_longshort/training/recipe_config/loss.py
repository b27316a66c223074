"""The ``loss`` section: a ``_component_`` node for :class:`~torchtune_longshort.loss.LongShortLoss` (or a subclass).

Its defaults stay the loss's own (read from its signature); the fields the recipe and the cross-field rules read are
typed and checked here with the loss module's validators, so a bad value is refused before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Tuple

from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.loss.longshort_loss import validate_alpha, validate_num_chunks
from torchtune_longshort.loss.divergences import check_trainable, divergence_fn
from torchtune_longshort.config.fields import FROM_COMPONENT, ComponentSection, setting
from torchtune_longshort.config.values import resolve_component, wrapped
from torchtune_longshort.windows import validate_min_context


@dataclass(frozen=True)
class LossConfig(ComponentSection):
    """``loss``: ``(ce_A + ce_B) / 2 + alpha * divergence`` over dual windows (paper Eq. 3-5)."""

    DOC_COMPONENT: ClassVar[str] = "torchtune_longshort.loss.LongShortLoss"  # whose defaults the README shows
    # how many chunks the shared positions are cut into changes only the summation order and the peak memory (a
    # resumed run may need more chunks on another GPU); the rest of the loss is what the run trains
    RESUME_APPLIED: ClassVar[Tuple[str, ...]] = ("num_chunks",)

    alpha: float = setting(FROM_COMPONENT,
                           doc="weight of the misalignment term (0: the CE baseline on the same tokens)",
                           check=wrapped(validate_alpha, converts=True))
    divergence: str = setting(FROM_COMPONENT, doc="sce (paper Eq. 3), jeffreys or js, or a function's dotted path",
                              check=wrapped(divergence_fn))
    min_context: Any = setting(FROM_COMPONENT, doc="floor of the compared contexts: listing, inclusive, none or an int",
                               check=wrapped(validate_min_context), nullable=True)
    num_chunks: int = setting(FROM_COMPONENT, doc="chunks over the L + e shared positions",
                              check=wrapped(validate_num_chunks))

    def check(self, where: str) -> None:
        cls = resolve_component(f"{where}._component_", self.component)
        if not (isinstance(cls, type) and issubclass(cls, LongShortLoss)):
            theirs = (" (torchtune's cross-entropy: LongShortLoss with loss.alpha=0 is cross-entropy on the same "
                      "windows, chunked over the output layer by loss.num_chunks)"
                      if str(self.component).startswith("torchtune.modules.loss.") else "")
            raise ValueError(f"{where}._component_={self.component!r} is not accepted: expected "
                             f"torchtune_longshort.loss.LongShortLoss or a subclass{theirs}")
        check_trainable(self.divergence, self.alpha, f"{where}.")  # alpha 0: reported, never differentiated
