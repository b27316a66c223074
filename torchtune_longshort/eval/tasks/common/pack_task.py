"""The lm-eval task class of the pack's length-swept tasks: lengths come from ``--metadata``, metrics per length.

A task YAML lists its base metrics once (``ppl`` with its aggregation); ``process_results`` reports them per length
and depth, ``<metric>_<suffix>`` (``ppl_4k``, ``acc_2k_d50``: names from :mod:`torchtune_longshort.eval.lengths`).
lm-eval looks a reported metric's aggregation up by its exact name and falls back to a plain mean (with a warning)
for names its ``metric_list`` lacks, so this class gives each suffixed name the aggregation and
``higher_is_better`` of its base metric the first time it is reported; no YAML spells out a metric per length.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

from lm_eval.api.task import ConfigurableTask

from torchtune_longshort.eval.lengths import length_label
from torchtune_longshort.eval.unavailable import ERROR_FIELD, TaskDataError, placeholder


class LengthSweptTask(ConfigurableTask):
    """``ConfigurableTask`` whose ``<metric>_<suffix>`` results aggregate as their base ``metric`` does (the
    longest ``metric_list`` name that ``key`` starts with, followed by ``_``)."""

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        config = dict(config or {})
        config.pop("class", None)  # lm-eval passes the YAML's ``class`` key through; TaskConfig rejects it
        super().__init__(config=config, **kwargs)

    def base_metric(self, key: str) -> Optional[str]:
        """The ``metric_list`` name ``key`` is a per-length / per-depth variant of (None: not one)."""
        bases = [m for m in self._aggregation_list if key.startswith(m + "_")]
        return max(bases, key=len) if bases else None

    def process_results(self, doc: Dict[str, Any], results: Any) -> Dict[str, Any]:
        out = super().process_results(doc, results)
        for key in out:
            base = None if key in self._aggregation_list else self.base_metric(key)
            if base is not None:
                self._aggregation_list[key] = self._aggregation_list[base]
                self._higher_is_better[key] = self._higher_is_better.get(base)
        return out


def sweep_dataset(task: str, lengths: Sequence[int], rows_at: Callable[[int], List[Dict[str, Any]]],
                  placeholder_row: Callable[[int], Dict[str, Any]]):
    """A length-swept ``custom_dataset``: ``{"test": rows_at(L) for each L}``, each row with an empty ``error``.

    A length that cannot run (``TaskDataError`` / ``FileNotFoundError``: no data, longer than the model) gives
    one ``placeholder_row(L)`` whose ``error`` holds the reason (scored NaN with it), and the other lengths run."""
    import datasets

    rows: List[Dict[str, Any]] = []
    for length in lengths:
        try:
            rows += [{**row, ERROR_FIELD: ""} for row in rows_at(length)]
        except (TaskDataError, FileNotFoundError) as err:
            rows += placeholder(f"{task} at length {length_label(length)}", str(err), placeholder_row(length)).to_list()
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
