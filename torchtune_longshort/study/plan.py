"""The study's ``plan`` section: the study split into commands that each fit one device call, with the time
arithmetic that says so, checked before anything runs.

A lent GPU gives a task 15 minutes of device time, at most 10 minutes a call; a study of several seeds does not fit
one call. ``plan.commands`` lists the commands in order, each the run keys it finishes (``base``: the base's
evaluation); ``python -m torchtune_longshort.study --config C --command K`` runs the K-th (1-based) as ``--only``
would, and ``--plan`` prints every command with its estimate. Each command's estimate is::

    start_s + base_eval_s (when it holds ``base``) + ceil(fine-tunes / jobs) x (train_s + eval_s)

from ``plan.parts``, seconds measured on the device (the config says where and when, and which are estimated). A
plan whose commands miss a run of the grid, name a run the grid lacks or name one twice, or whose estimate for a
command exceeds ``budget_s``, is refused when the config is loaded, in one line with the arithmetic. The ``--quick``
variant (a CPU smoke, its own grid) does not read the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

from torchtune_longshort.plural import counted
from torchtune_longshort.study.fields import StudySection, setting
from torchtune_longshort.config.values import number

BASE_KEY = "base"


def _commands(path: str, value: Any) -> List[List[str]]:
    """A non-empty list of non-empty lists of run keys."""
    if not isinstance(value, list) or not value or not all(isinstance(c, list) and c for c in value):
        raise ValueError(f"{path}={value!r}: expected a list of commands, each a non-empty list of run keys "
                         "(e.g. [[base, pi_a0_s0, pi_a0.1_s0], [yarn_a0_s0, yarn_a0.1_s0]])")
    for i, c in enumerate(value):
        if not all(isinstance(k, str) and k for k in c):
            raise ValueError(f"{path}[{i}]={c!r}: run keys are strings (`base`, or <method>_a<alpha>_s<seed>)")
    return [list(c) for c in value]


@dataclass(frozen=True)
class PlanParts(StudySection):
    """``plan.parts``: wall seconds of each part of a command on the device."""

    start_s: float = setting(doc="start-up of one command (imports, the base's fetch and conversion, task data)",
                             check=number(0.0))
    base_eval_s: float = setting(doc="the base's evaluation (it runs alone)", check=number(0.0))
    train_s: float = setting(doc="one fine-tune while `jobs` share the device", check=number(0.0))
    eval_s: float = setting(doc="one fine-tune's evaluation while `jobs` share the device", check=number(0.0))


@dataclass(frozen=True)
class PlanConfig(StudySection):
    """``plan``: the commands of the study and the budget each must fit."""

    budget_s: float = setting(doc="the longest a command may take, in seconds (one device call, less a margin)",
                              check=number(0.0, inclusive=False))
    parts: PlanParts = setting(doc="the measured seconds the estimates are made of", section=PlanParts)
    commands: List[List[str]] = setting(doc="the commands in order, each the run keys it finishes (base: the "
                                        "base's evaluation)", check=_commands)

    def estimate(self, keys: Sequence[str], jobs: int) -> Tuple[float, str]:
        """Seconds one command of ``keys`` takes, and the arithmetic as one line."""
        p = self.parts
        fine = [k for k in keys if k != BASE_KEY]
        waves = math.ceil(len(fine) / jobs)
        total = p.start_s + (p.base_eval_s if BASE_KEY in keys else 0.0) + waves * (p.train_s + p.eval_s)
        base = f" + {p.base_eval_s:g} base evaluation" if BASE_KEY in keys else ""
        line = (f"{p.start_s:g} start{base} + {counted(waves, 'wave')} of up to {jobs} fine-tunes x "
                f"({p.train_s:g} train + {p.eval_s:g} evaluation) = {total:g} s")
        return total, line

    def check_with(self, run_keys: Sequence[str], jobs: int, path: str = "plan") -> None:
        """Every run in exactly one command, no other key, and each command within ``budget_s``; ValueError naming
        the command and the keys, or giving the arithmetic."""
        named = [k for c in self.commands for k in c]
        twice = sorted({k for k in named if named.count(k) > 1})
        unknown = sorted(set(named) - set(run_keys))
        missing = [k for k in run_keys if k not in named]
        if twice or unknown or missing:
            parts = ([f"named twice: {', '.join(twice)}"] if twice else []) + (
                [f"not runs of this grid: {', '.join(unknown)}"] if unknown else []) + (
                [f"in no command: {', '.join(missing)}"] if missing else [])
            raise ValueError(f"{path}.commands must name every run of the grid once ({'; '.join(parts)}); the grid's "
                             f"runs: {', '.join(run_keys)}")
        for i, keys in enumerate(self.commands, 1):
            total, line = self.estimate(keys, jobs)
            if total > self.budget_s:
                raise ValueError(f"{path}.commands[{i - 1}] (command {i}: {', '.join(keys)}) is estimated at {line}, "
                                 f"over budget_s={self.budget_s:g}: split it into smaller commands")

    def command(self, k: int, path: str = "--command") -> List[str]:
        """The run keys of command ``k`` (1-based)."""
        if not 1 <= k <= len(self.commands):
            raise ValueError(f"{path} {k}: the plan has commands 1..{len(self.commands)}")
        return list(self.commands[k - 1])

    def table(self, jobs: int, config: str) -> str:
        """The plan as a Markdown table: each command, its runs, its estimate, and the line that runs it."""
        rows = ["| # | runs | estimate | command |", "|---|---|---|---|"]
        for i, keys in enumerate(self.commands, 1):
            _, line = self.estimate(keys, jobs)
            rows.append(f"| {i} | {', '.join(keys)} | {line} | `python -m torchtune_longshort.study --config "
                        f"{config} --command {i}` |")
        return "\n".join(rows) + f"\n\nBudget per command: {self.budget_s:g} s."
