"""The one place that decides whether a request runs as it is, is cut, or is refused, and says why.

A cut prompt is scored as if it were the task, so by default nothing is cut: a prompt longer than the model runs
is refused (NaN with the reason, ``torchtune_longshort.eval.tasks.common.unavailable``). A task whose benchmark
protocol truncates says so in each of its docs, under :data:`TRUNCATION_FIELD`: LongBench (and LongBench-E) cut
a prompt in the *middle* (the instruction at the start and the question at the end both survive), so its loader
marks its docs ``"middle"``; the passkey docs say ``"none"`` (a cut passkey prompt can keep a needle near its end
and inflate the score). For tasks that say nothing, the model's own rule decides: the ``longshort`` model's
``truncation`` argument (``none`` by default; ``left`` / ``middle`` as an explicit choice), lm-eval's ``hf``
model's fixed left cut.

:meth:`RequestLimits.plan` is that decision, on token counts. The ``longshort`` model applies it to every request
(:meth:`RequestLimits.fit` cuts the tokens as planned); the pack's tasks apply it to a generation request before
it is sent to another model (:meth:`RequestLimits.of_other_model`), so that ``hf`` neither crashes on a generation
budget it has no room for nor cuts a prompt the task says may not be cut that way. A refused request is not an
error: the task scores it NaN with the reason and the run goes on. Each kind of refusal is logged once per task.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torchtune_longshort.started_as import EVAL_MAIN, advised_command

logger = logging.getLogger(__name__)

TRUNCATION_SIDES = ("left", "middle")
# "none": never cut, refuse instead.
TRUNCATION_POLICIES = ("none", *TRUNCATION_SIDES)
# The doc field in which a task declares its benchmark's truncation protocol (one of TRUNCATION_POLICIES).
TRUNCATION_FIELD = "prompt_truncation"


def check_truncation(truncation: str) -> str:
    """Validate a truncation policy name; returns it unchanged or raises ``ValueError`` naming what is accepted."""
    if truncation not in TRUNCATION_POLICIES:
        raise ValueError(f"truncation={truncation!r} is not supported; accepted: {', '.join(TRUNCATION_POLICIES)}")
    return truncation


def declared_truncation(doc: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The truncation policy a task declares in ``doc`` (``None``: the task says nothing)."""
    value = (doc or {}).get(TRUNCATION_FIELD)
    return check_truncation(str(value)) if value else None


def truncate_tokens(tokens: Sequence[int], budget: int, truncation: str = "left") -> List[int]:
    """Cut ``tokens`` to at most ``budget`` tokens: ``"left"`` keeps the last ``budget`` (lm-eval's ``hf``),
    ``"middle"`` the first ``budget // 2`` and the last ``budget - budget // 2`` (LongBench's ``pred.py``).
    Returns a new list; ``tokens`` unchanged when it already fits."""
    if truncation not in TRUNCATION_SIDES:
        raise ValueError(f"truncation={truncation!r} cannot cut a prompt; accepted: {', '.join(TRUNCATION_SIDES)}")
    if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget={budget!r} must be an int >= 1")
    tokens = list(tokens)
    if len(tokens) <= budget:
        return tokens
    if truncation == "left":
        return tokens[-budget:]
    head = budget // 2
    return tokens[:head] + tokens[len(tokens) - (budget - head) :]


class RequestTooLong(Exception):
    """A request of ``n_tokens`` tokens past the ``limit`` the model runs (``what``: the request type)."""

    def __init__(self, n_tokens: int, limit: int, what: str):
        super().__init__(f"{what}: {n_tokens} tokens > {limit}")
        self.n_tokens, self.limit, self.what = n_tokens, limit, what


@dataclass(frozen=True)
class Plan:
    """What happens to one request: ``keep`` tokens of its cuttable part (its context or prompt) run, cut by
    ``cut`` ("" when uncut); ``reason`` is non-empty when it is refused instead."""

    keep: int
    cut: str = ""
    reason: str = ""
    kind: str = ""  # the refusal's kind (logged once per task and kind)


@dataclass
class RequestLimits:
    """The length rules of one model and the refusals they produce.

    Attributes:
        model: the lm-eval model name (``longshort``, ``hf``, ...), named in every reason.
        max_length: the longest sequence it runs; ``usable_length``: the positions its RoPE covers;
        allow_extrapolation: whether it runs past ``usable_length``.
        truncation: its cut for prompts of tasks that declare none (``none``: refuse);
        cuts: the cuts it can make at all (``hf``: left only).
    """

    model: str
    max_length: int
    usable_length: int
    allow_extrapolation: bool = False
    truncation: str = "none"
    cuts: Tuple[str, ...] = TRUNCATION_SIDES
    # the rope=... override (None: none) and the pre-trained positions it scales, for the fix a refusal names
    rope_override: Optional[Mapping[str, Any]] = None
    pretrained_length: int = 0

    def __post_init__(self) -> None:
        self._refused: Dict[Tuple[str, str], int] = defaultdict(int)

    @classmethod
    def of_model_args(cls, args: Any) -> "RequestLimits":
        """The ``longshort`` model's limits, from its checked :class:`~.args.ModelArgs`."""
        override = getattr(args, "rope_spec", None)
        pretrained = 0
        if override is not None:
            from torchtune_longshort.models.folder_rope import pretrained_rope  # deferred: torch

            pretrained = int(override.get("original_max_seq_len") or pretrained_rope(args.folder)[1])
        return cls("longshort", args.max_length, args.usable_length, args.allow_extrapolation, args.truncation,
                   rope_override=override, pretrained_length=pretrained)

    @classmethod
    def of_other_model(cls, model: str, max_length: int) -> "RequestLimits":
        """The limits of a model of lm-eval's (``hf``): ``max_length`` positions, prompts cut from the left."""
        return cls(model, max_length, max_length, False, "left", ("left",))

    @property
    def run_limit(self) -> int:
        """The longest sequence run: ``max_length``, capped at the covered positions unless extrapolating."""
        return self.max_length if self.allow_extrapolation else min(self.max_length, self.usable_length)

    # ------------------------------------------------------------------ the decision
    def plan(self, n_cut: int, n_fixed: int, what: str, declared: Optional[str] = None, slack: int = 0) -> Plan:
        """Whether a request of ``n_cut`` cuttable tokens (context / prompt) and ``n_fixed`` tokens that may not be
        cut (continuation / generation budget) runs, is cut, or is refused.

        ``slack``: positions the request needs fewer than its tokens (1 for a log-likelihood, whose last token is
        not an input). ``declared``: the task's truncation (:func:`declared_truncation`), else the model's own."""
        room = self.max_length + slack - n_fixed
        if room < 1 and what == "generate_until":
            return Plan(0, reason=self._no_room_reason(n_fixed), kind="no room")
        if room < 1:  # a continuation longer than the model: it cannot be cut, and the fix is more positions
            err = RequestTooLong(n_fixed, self.max_length, f"{what} continuation")
            return Plan(0, reason=self.too_long_reason(err), kind=err.what)
        keep, cut = n_cut, ""
        if n_cut > room:
            policy, who = (declared, "declared by the task") if declared else (self.truncation, self._own_rule())
            if policy not in self.cuts:
                return Plan(0, reason=self._no_cut_reason(room, what, policy, who), kind="no cut")
            keep, cut = room, policy
        n_run = keep + n_fixed - slack
        if n_run > self.run_limit:
            return Plan(0, reason=self.too_long_reason(RequestTooLong(n_run, self.run_limit, what)), kind=what)
        return Plan(keep, cut)

    def fit(self, cuttable: Sequence[int], n_fixed: int, what: str, doc: Optional[Mapping[str, Any]] = None,
            slack: int = 0) -> Tuple[Optional[List[int]], Plan]:
        """:meth:`plan` applied to tokens: ``(cuttable tokens to run, plan)``; the tokens are None when refused."""
        plan = self.plan(len(cuttable), n_fixed, what, declared_truncation(doc), slack)
        if plan.reason:
            return None, plan
        return (truncate_tokens(cuttable, plan.keep, plan.cut) if plan.cut else list(cuttable)), plan

    def check_length(self, n_tokens: int, what: str) -> None:
        """Raise :class:`RequestTooLong` when ``n_tokens`` is past what the model runs (requests never cut)."""
        if n_tokens > self.run_limit:
            raise RequestTooLong(n_tokens, self.run_limit, what)

    # ------------------------------------------------------------------ the reasons
    def _own_rule(self) -> str:
        if self.model == "longshort":
            return f"model_args truncation={self.truncation}"
        return f"--model {self.model} cuts prompts from the left"

    def _fix(self) -> str:
        if self.model == "longshort":
            return "raise max_length (with rope=<method>,rope_factor=<f> past the trained positions)"
        return (f"use a model with more positions, or {advised_command(EVAL_MAIN)} --model longshort with "
                "rope=<method>,rope_factor=<f>")

    def _no_room_reason(self, max_gen: int) -> str:
        return (f"max_gen_toks={max_gen} leaves no room for a prompt in max_length={self.max_length} of --model "
                f"{self.model}: refused, scored NaN. Fix: {self._fix()}")

    def _no_cut_reason(self, room: int, what: str, policy: str, who: str) -> str:
        less = ", less the generation budget" if what == "generate_until" else ""
        if policy == "none":
            rule = f"may not be cut (truncation=none, {who})"
        else:
            rule = f"may only be cut {policy} ({who}), which --model {self.model} cannot do"
        # The prompt's own length is left out: one reason per kind, counted over the samples it stands for.
        return (f"a {what} prompt longer than the {room} tokens --model {self.model} can take "
                f"(max_length={self.max_length}{less}) and {rule}: refused, scored NaN. Fix: {self._fix()}; cutting is "
                "for tasks whose benchmark protocol declares it")

    def too_long_reason(self, err: RequestTooLong) -> str:
        """What a too-long request's result says: the numbers and the fix."""
        fixes = []
        if err.n_tokens > self.max_length:
            fixes.append(f"raise max_length (now {self.max_length})")
        if err.n_tokens > self.usable_length and not self.allow_extrapolation:
            if self.rope_override is not None:
                # deferred: torch (the tasks read these limits for any model)
                from torchtune_longshort.models.checkpoint_open import override_scale_fix

                scale = override_scale_fix(dict(self.rope_override), self.pretrained_length, err.n_tokens)
            else:
                scale = "pass rope=<method>,rope_factor=<f> to scale RoPE"
            fixes.append(f"{scale}, or allow_extrapolation=true")
        return (
            f"a {err.what} request needs {err.n_tokens} tokens but --model {self.model} runs at most {err.limit} "
            f"(max_length={self.max_length}, positions covered={self.usable_length}): refused, scored NaN. "
            f"Fix: {'; '.join(fixes) or self._fix()}"
        )

    def refuse(self, task: Optional[str], err: Any, kind: str = "") -> str:
        """Log a refused request (once per task and ``kind``) and return the reason its result carries.
        ``err``: a :class:`Plan`, a :class:`RequestTooLong` or the reason text."""
        if isinstance(err, Plan):
            reason, kind = err.reason, kind or err.kind
        elif isinstance(err, RequestTooLong):
            reason, kind = self.too_long_reason(err), kind or err.what
        else:
            reason, kind = str(err), kind or str(err)
        reason = f"{task or '?'}: {reason}"
        key = (task or "?", kind)
        self._refused[key] += 1
        if self._refused[key] == 1:
            logger.error("%s. Further such requests of this task are refused silently; the rest of the run goes on.",
                         reason)
        return reason
