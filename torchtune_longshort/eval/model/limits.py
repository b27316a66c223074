"""Which requests the ``longshort`` model runs, which prompts it may cut, and the reason it gives when it refuses.

A refused request is not an error: its result carries the reason (``torchtune_longshort.eval.unavailable``), the
task scores it NaN, and the run goes on. Each kind of refusal is logged once per task.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Dict, Optional, Tuple, Union

from torchtune_longshort.eval.model_args import ModelArgs
from torchtune_longshort.eval.truncation import declared_truncation

logger = logging.getLogger(__name__)


class RequestTooLong(Exception):
    """A request of ``n_tokens`` tokens past the ``limit`` the model runs (``what``: the request type)."""

    def __init__(self, n_tokens: int, limit: int, what: str):
        super().__init__(f"{what}: {n_tokens} tokens > {limit}")
        self.n_tokens, self.limit, self.what = n_tokens, limit, what


class RequestLimits:
    """The length rules of one model (its :class:`ModelArgs`) and the refusals they produce."""

    def __init__(self, args: ModelArgs):
        self.max_length = args.max_length
        self.usable_length = args.usable_length
        self.allow_extrapolation = args.allow_extrapolation
        self.run_limit = args.run_limit
        self.truncation = args.truncation
        self._refused: Dict[Tuple[str, str], int] = defaultdict(int)

    def check_length(self, n_tokens: int, what: str) -> None:
        """Raise :class:`RequestTooLong` when ``n_tokens`` is past what the model runs."""
        if n_tokens > self.run_limit:
            raise RequestTooLong(n_tokens, self.run_limit, what)

    def too_long_reason(self, err: RequestTooLong) -> str:
        """What a too-long request's result says: the numbers and the fix."""
        fixes = []
        if err.n_tokens > self.max_length:
            fixes.append(f"raise max_length (now {self.max_length})")
        if err.n_tokens > self.usable_length and not self.allow_extrapolation:
            fixes.append("pass rope=<method>,rope_factor=<f> to scale RoPE, or allow_extrapolation=true")
        return (
            f"a {err.what} request needs {err.n_tokens} tokens but this model runs at most {err.limit} "
            f"(max_length={self.max_length}, positions covered={self.usable_length}): refused, scored NaN. "
            f"Fix: {'; '.join(fixes)}"
        )

    def refuse(self, task: Optional[str], err: Union[RequestTooLong, str], kind: str = "") -> str:
        """Log a refused request (once per task and ``kind``) and return the reason its result carries."""
        reason = err if isinstance(err, str) else self.too_long_reason(err)
        reason = f"{task or '?'}: {reason}"
        key = (task or "?", kind or (err if isinstance(err, str) else err.what))
        self._refused[key] += 1
        if self._refused[key] == 1:
            logger.error("%s. Further such requests of this task are refused silently; the rest of the run goes on.",
                         reason)
        return reason

    def cut_policy(self, doc: Optional[Dict[str, Any]]) -> Tuple[str, str]:
        """``(policy, who decided)``: the task's declared truncation, else this model's ``truncation``."""
        declared = declared_truncation(doc)
        if declared is not None:
            return declared, "declared by the task"
        return self.truncation, f"model_args truncation={self.truncation}"

    def no_cut_reason(self, n_tokens: int, budget: int, what: str, who: str) -> str:
        """What the result of a prompt too long to run and not to be cut says."""
        return (
            f"a {what} prompt of {n_tokens} tokens is longer than the {budget} this model can take "
            f"(max_length={self.max_length}{', less the generation budget' if what == 'generate_until' else ''}) "
            f"and may not be cut (truncation=none, {who}): refused, scored NaN. Fix: raise max_length "
            "(with rope=<method>,rope_factor=<f> past the trained positions); cutting is for tasks whose "
            "benchmark protocol declares it"
        )
