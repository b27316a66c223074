"""The paper's long-short misalignment (Eq. 4) as an lm-eval task (``longshort_misalignment``, its YAML next to
this module).

    M = E_x E_{l1, l2 ~ U[L/2, L]} D( p(. | x[-l1:]), p(. | x[-l2:]) ),   D in {SCE (Eq. 3), Jeffreys, JS}

The task ``longshort_misalignment`` runs at each length ``L`` of its ``max_seq_lengths`` metadata
(``mis_max_seq_lengths`` when set) and reports ``sce_<L>``, ``jeffreys_<L>`` and ``js_<L>``. Each sample is ``L`` tokens
of text with one ``(l1, l2)`` draw (inclusive range ``[L/2, L]``, seeded; ``mis_min_frac`` / ``mis_max_frac``: another
range, as fractions of L, :mod:`~torchtune_longshort.eval.tasks.common.suffix_range`). The score
needs full next-token distributions, which no lm-eval request type returns, so the task sends requests of its own
type ``next_token_divergence``; the ``longshort`` model answers them with
``torchtune_longshort.metrics.suffix_misalignment`` (the same code as the ``longshort-misalignment`` CLI).
Other lm-eval models do not implement that request type: under any other model the task refuses before any
request is built (its placeholder rows score NaN with the reason and send nothing; the model is named by the
``lm_eval_model`` metadata key that ``longshort-eval`` sets, see ``unavailable.model_of``), and the other tasks of the
run finish.

Task metadata: ``mis_source`` (stdlib | stdlib_tests | stdlib_heldout | pg19 | hf | local; with ``mis_data_files``
etc. as for longshort_ppl), ``mis_num_samples`` (default: the metric's ``DEFAULT_NUM_SAMPLES``), ``mis_chunks_per_doc``
(1), ``mis_join_documents`` (false: each sample from a document's start; true: the documents packed into one stream,
cut end to end, as for longshort_ppl), ``mis_skip_bad_records`` (false, as for longshort_ppl), ``mis_seed`` (0),
``mis_min_frac`` / ``mis_max_frac`` (0.5, 1), ``mis_divergences`` (["sce", "jeffreys", "js"]; or
dotted paths of per-position functions of one's own, ``my_divs.my_div``, reported as ``my_divs.my_div_<L>``).
"""

from __future__ import annotations

import logging
import random
from typing import Any, Dict, List, Optional, Sequence

from lm_eval.api.instance import Instance

from torchtune_longshort.eval.tasks import MIS_DEFAULT_SEED, TASK_FAMILIES, VALUE_KINDS, divergence_names
from torchtune_longshort.eval.tasks.common.lengths import length_label, lengths_from_metadata, per_length
from torchtune_longshort.eval.tasks.common.pack_task import PackTask, sweep_dataset, unsent_request
from torchtune_longshort.eval.tasks.common.long_text import samples_from_metadata
from torchtune_longshort.eval.tasks.common.token_sequences import FixedLengthSample, TaskTokenizer
from torchtune_longshort.eval.tasks.common.suffix_range import suffix_range
from torchtune_longshort.eval.tasks.common.unavailable import (
    TaskDataError, nan_results, needs_longshort, reason_of, refusal_of,
)
from torchtune_longshort.loss.divergences import DIVERGENCES
from torchtune_longshort.metrics.misalignment import DEFAULT_NUM_SAMPLES

logger = logging.getLogger(__name__)
FAMILY = TASK_FAMILIES["misalignment"]
# The prefix of this task's metadata keys (mis_source, mis_max_seq_lengths, ...).
METADATA_PREFIX = FAMILY.metadata_prefix
REQUEST_TYPE = "next_token_divergence"
# The request type of a placeholder row (never sent: PackTask builds it unsent; lm-eval's TaskConfig needs a type
# of its own list until there is data).
PLACEHOLDER_REQUEST = "loglikelihood_rolling"


def misalignment_samples(metadata: Dict[str, Any], length: int,
                         tokenizer: Optional[TaskTokenizer] = None) -> List[FixedLengthSample]:
    """The ``mis_num_samples`` texts of ``length`` tokens ``longshort_misalignment`` scores at ``length`` (its metadata
    as lm-eval passes it; ``tokenizer`` default: the model's). The study's pre-flight check asks this too.

    Raises:
        TaskDataError: the source cannot give them (with the counts).
    """
    return samples_from_metadata(metadata, METADATA_PREFIX, length,
                                 int(metadata.get("mis_num_samples", DEFAULT_NUM_SAMPLES)), tokenizer)


def misalignment_dataset(**metadata: Any):
    """lm-eval ``custom_dataset`` of ``longshort_misalignment``: at each length of ``mis_max_seq_lengths`` /
    ``max_seq_lengths``, rows ``text`` (exactly ``length`` tokens), ``l1``, ``l2``, ``length``, ``error``."""

    def rows_at(length: int) -> List[Dict[str, Any]]:
        drawn = suffix_range(metadata, length)  # a bad mis_min_frac / mis_max_frac: NaN with the reason
        samples = misalignment_samples(metadata, length)
        rng = random.Random(f"{metadata.get('mis_seed', MIS_DEFAULT_SEED)}-{length}")
        rows = []
        for s in samples:
            l1, l2 = rng.randint(*drawn), rng.randint(*drawn)
            rows.append({"text": s.text, "l1": l1, "l2": l2, "length": length, "doc_index": s.doc_index})
        return rows

    return sweep_dataset(FAMILY.task, lengths_from_metadata(metadata, METADATA_PREFIX), rows_at, _placeholder_row)


def _placeholder_row(length: int) -> Dict[str, Any]:
    return {"text": "unavailable", "l1": 1, "l2": 1, "length": length, "doc_index": -1}


class MisalignmentTask(PackTask):
    """A length-swept task whose requests ask the model for next-token divergences (request type
    :data:`REQUEST_TYPE`, which lm-eval's ``output_type`` cannot name) instead of log-likelihoods.

    Under a model other than ``longshort`` it builds no data and sends no request: its placeholder rows (NaN, with
    the reason) are built unsent (:class:`PackTask`), so the rest of the run is not lost to an ``AttributeError``."""

    def __init__(self, config: Dict[str, Any] | None = None, **kwargs: Any) -> None:
        # lm-eval's TaskConfig accepts only its own output types; the one set here is the request the placeholder
        # row sends, and OUTPUT_TYPE becomes REQUEST_TYPE once there is data (lm-eval pads ranks by it).
        self._told: set = set()  # the lengths whose refusal at construct_requests was logged
        super().__init__(config={**(config or {}), "output_type": PLACEHOLDER_REQUEST}, **kwargs)

    def _needs_longshort(self) -> str | None:
        metadata = {**(self.config.metadata or {}), **(self.config.dataset_kwargs or {})}
        return needs_longshort(self.config.task or FAMILY.task, metadata,
                               "it compares full next-token distributions, request type " + REQUEST_TYPE)

    def download(self, dataset_kwargs: Dict[str, Any] | None = None, **kwargs: Any) -> None:
        metadata = {**(self.config.metadata or {}), **(self.config.dataset_kwargs or {})}
        reason = self._needs_longshort()
        if reason:
            def refuse(length: int) -> List[Dict[str, Any]]:
                raise TaskDataError(reason)

            self.dataset = sweep_dataset(self.config.task or FAMILY.task,
                                         lengths_from_metadata(metadata, METADATA_PREFIX), refuse, _placeholder_row)
            return
        super().download(dataset_kwargs, **kwargs)
        self.OUTPUT_TYPE = REQUEST_TYPE

    def add_metric(self, key: str) -> None:
        """A divergence of one's own (``my_divs.my_div_4k``: no base metric in the YAML's ``metric_list``) gets
        the shipped ones' aggregation (mean) and ``higher_is_better`` (false), not lm-eval's fallback warning."""
        super().add_metric(key)
        if key not in self._aggregation_list and "." in key and "sce" in self._aggregation_list:
            self._aggregation_list[key] = self._aggregation_list["sce"]
            self._higher_is_better[key] = self._higher_is_better.get("sce")

    def process_results(self, doc: Dict[str, Any], results: Any) -> Dict[str, Any]:
        """The divergences (:func:`process_results`); under ``--predict_only``, which swaps every task's metrics for
        lm-eval's ``bypass`` and its ``process_results`` for lm-eval's own by output type, ``bypass`` as lm-eval's
        own types give it (lm-eval knows no ``next_token_divergence``: the run ended in a ``ValueError`` once every
        request had run, with no results file)."""
        if "bypass" in self._metric_fn_list and not callable(self.config.process_results):
            return {"bypass": None}
        out = super().process_results(doc, results)
        if reason_of(doc) or refusal_of(results[0]):  # unscored: NaN under the divergences asked for, not all shipped
            out = {per_length(d, int(doc["length"])): float("nan") for d in self.divergences() or DIVERGENCES}
            for key in out:
                self.add_metric(key)
        return out

    def divergences(self) -> Optional[List[str]]:
        """The divergences ``mis_divergences`` asks for (default: the shipped three); None for a value that names
        none (longshort-eval refuses it before lm-eval starts)."""
        given = (self.config.metadata or {}).get("mis_divergences")
        return list(DIVERGENCES) if given in (None, "", []) else divergence_names(given)

    def construct_requests(self, doc: dict, ctx: Any, **kwargs: Any) -> Instance:
        if reason_of(doc):
            return super().construct_requests(doc, ctx, **kwargs)  # unsent, with the reason
        # a task loaded before lm-eval's evaluate() was handed the model (Python callers) is told the model here
        refused = self._needs_longshort()
        if refused:
            where = f"{self.config.task or FAMILY.task} at length {length_label(int(doc['length']))}"
            if where not in self._told:
                self._told.add(where)
                logger.error("%s: %s -- no score for it (the results file gives this reason)", where, refused)
            return unsent_request(PLACEHOLDER_REQUEST, doc, (doc["text"],), f"{where}: {refused}", kwargs["metadata"])
        kwargs.pop("apply_chat_template", None)
        kwargs.pop("chat_template", None)
        divs = self.divergences()
        if divs is None:  # longshort-eval refuses it before lm-eval starts; lm_eval's own CLI comes here
            given = (self.config.metadata or {}).get("mis_divergences")
            raise TaskDataError(f"mis_divergences={given!r}: expected {VALUE_KINDS['divergences'][1]}")
        return Instance(
            request_type=REQUEST_TYPE,  # type: ignore[arg-type]
            doc=doc,
            arguments=(doc["text"], {"l1": int(doc["l1"]), "l2": int(doc["l2"]), "divergences": divs}),
            idx=0,
            **kwargs,
        )


def process_results(doc: Dict[str, Any], results: Sequence[Dict[str, float]]) -> Dict[str, float]:
    """One value per divergence at the row's length (``sce_<L>``, ``jeffreys_<L>``, ``js_<L>``); NaN and the reason
    (metric ``error``) for a placeholder row or a request the model refused (under the shipped names here, which
    :meth:`MisalignmentTask.process_results` puts under the ones ``mis_divergences`` asks for)."""
    reason = reason_of(doc) or refusal_of(results[0])
    length = int(doc["length"])
    if reason:
        return nan_results(reason, {per_length(d, length): float("nan") for d in DIVERGENCES})
    return {per_length(d, length): float(v) for d, v in results[0].items()}
