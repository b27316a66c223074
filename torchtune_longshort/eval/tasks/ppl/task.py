"""Long-context perplexity as an lm-eval task (``longshort_ppl``, its YAML next to this module): data, scoring,
per-position curve.

The task ``longshort_ppl`` scores, at each length ``L`` of its ``max_seq_lengths`` metadata (``ppl_max_seq_lengths``
when set), ``num_samples`` sequences of exactly ``L`` tokens, one per document (each
document truncated to ``L`` tokens, as YaRN and CLEX report PG19 perplexity). A sample is one ``loglikelihood``
request with an empty context, so the model sees ``[BOS] + x[:-1]`` and predicts all ``L`` tokens of ``x`` in one
window (no rolling windows, no truncation); lm-eval's ``hf`` model and ``longshort`` score it identically (dynamic
NTK past L excepted when one run holds several lengths: transformers keeps the base of the longest call before,
``docs/rope.md``).

    ppl_L = exp( sum_docs sum_t NLL(x_t) / sum_docs L )      (metric ppl_<L>, e.g. ppl_4k; also token_nll_<L>)

With the ``longshort`` model the result also carries per-token log-probabilities; ``process_results`` returns them
as the ``curve_mean_nll_<L>`` item (lm-eval writes them to its samples file with ``--log_samples``) and the report turns
them into a per-position loss curve (CSV + PNG). The curve's mean over positions equals ``log(ppl_L)``. Other models
(lm-eval's ``hf``) return one sum per request, so their results list no ``curve_mean_nll_<L>`` at all (never a NaN
that reads as a failed measurement).

Task metadata (YAML ``metadata`` defaults, overridden by ``--metadata '{...}'``):
    ppl_source: stdlib | stdlib_tests | stdlib_heldout | pg19 | hf | local
    ppl_data_files: path/glob (.txt, .jsonl/.json with ppl_text_field)
    ppl_dataset_path / ppl_dataset_name / ppl_split / ppl_text_field: for ppl_source=hf
    ppl_num_samples (default 20), ppl_chunks_per_doc (default 1)
    ppl_join_documents (default false): pack the documents into one stream and cut the sequences from it end to end
        (a source of short documents then gives sequences of any length; token_sequences.fixed_length_samples)
    ppl_skip_bad_records (default false): a record of ppl_data_files or ppl_source=hf / pg19 that cannot be read (a
        row whose text field is no string, a line that is no JSON) is skipped with a warning; without it the length
        scores NaN with the record named (the other lengths and tasks go on)
    max_seq_lengths / ppl_max_seq_lengths: the lengths (default in the task YAML)
"""

from __future__ import annotations

import logging
import math
from typing import Any, Dict, List, Optional, Sequence

from torchtune_longshort.eval.tasks import TASK_FAMILIES
from torchtune_longshort.eval.tasks.common.lengths import length_label, lengths_from_metadata, per_length
from torchtune_longshort.eval.tasks.common.limit_share import within_limit
from torchtune_longshort.eval.tasks.common.pack_task import running_task, sweep_dataset
from torchtune_longshort.eval.tasks.common.long_text import samples_from_metadata
from torchtune_longshort.eval.tasks.common.token_sequences import FixedLengthSample, TaskTokenizer
from torchtune_longshort.eval.tasks.common.unavailable import (
    TooFewSequences, check_fits_model, nan_results, reason_of, refusal_of)

logger = logging.getLogger(__name__)
FAMILY = TASK_FAMILIES["ppl"]
# The prefix of this task's metadata keys (ppl_source, ppl_max_seq_lengths, ...).
METADATA_PREFIX = FAMILY.metadata_prefix


def ppl_samples(metadata: Dict[str, Any], length: int,
                tokenizer: Optional[TaskTokenizer] = None, check_model: bool = True) -> List[FixedLengthSample]:
    """The ``ppl_num_samples`` sequences ``longshort_ppl`` scores at ``length`` (its metadata as lm-eval passes it,
    model_args included; ``tokenizer`` default: the model's). The study's pre-flight check asks this too.

    Raises:
        TaskDataError: the source cannot give them (with the counts), or (``check_model``) the length is past the
            model.
    """
    if check_model:
        check_fits_model(length, metadata)
    return samples_from_metadata(metadata, METADATA_PREFIX, length, int(metadata.get("ppl_num_samples", 20)),
                                 tokenizer)


def long_ppl_dataset(**metadata: Any):
    """lm-eval ``custom_dataset`` of ``longshort_ppl``: a ``test`` split of fixed-length samples at each length of
    ``ppl_max_seq_lengths`` / ``max_seq_lengths`` (:func:`lengths.lengths_from_metadata`).

    Rows: ``text`` (exactly ``length`` tokens), ``n_tokens``, ``length``, ``doc_index``, ``start``, ``source``,
    ``error`` (empty, or the reason this length cannot run: then the row is a placeholder scored NaN).
    """
    source = str("local" if metadata.get("ppl_data_files") else metadata.get("ppl_source", "stdlib"))

    def rows_at(length: int) -> List[Dict[str, Any]]:
        # BOS + L tokens: the model runs L positions (it predicts the first token from BOS alone)
        try:
            samples = ppl_samples(metadata, length, check_model=False)  # past the model: rows kept, marked (fits)
        except TooFewSequences as err:  # a --limit below ppl_num_samples may need no more than were cut
            samples = within_limit(f"{running_task(FAMILY.task)} at length {length_label(length)}", err,
                                   int(metadata.get("ppl_num_samples", 20)), lambda n: ppl_samples(
                                       {**metadata, "ppl_num_samples": n}, length, check_model=False))
        return [{"text": s.text, "n_tokens": len(s.token_ids), "length": length, "doc_index": s.doc_index,
                 "start": s.start, "source": source} for s in samples]

    def placeholder_row(length: int) -> Dict[str, Any]:
        return {"text": " ", "n_tokens": 0, "length": length, "doc_index": -1, "start": -1, "source": source}

    return sweep_dataset(FAMILY.task, lengths_from_metadata(metadata, METADATA_PREFIX), rows_at, placeholder_row,
                         fits=lambda length: check_fits_model(length, metadata))


def process_results(doc: Dict[str, Any], results: Sequence[Any]) -> Dict[str, Any]:
    """Per-sample items at the row's length ``L``: ``(nll_sum, n_tokens)`` for ``ppl_<L>`` / ``token_nll_<L>`` and,
    when the model returns per-token log-probabilities (``longshort``), the per-token NLL list for
    ``curve_mean_nll_<L>`` (left out otherwise); NaN and the reason for a placeholder row, a refused request, or
    per-token values of another count than the sample's ``n_tokens`` (the request scored another sequence)."""
    res = results[0]
    reason = reason_of(doc) or refusal_of(res)
    length = int(doc["length"])
    ppl, nll, curve_key = (per_length(m, length) for m in ("ppl", "token_nll", "curve_mean_nll"))
    if reason:
        nan = (float("nan"), 1)
        return nan_results(reason, {ppl: nan, nll: nan})
    logprob = float(res[0])
    n = int(doc["n_tokens"])
    out: Dict[str, Any] = {ppl: (-logprob, n), nll: (-logprob, n)}
    token_lp = getattr(res, "token_logprobs", None)
    if token_lp is not None and len(token_lp) != n:  # another sequence was scored: its sum is not this sample's
        reason = (f"{running_task(FAMILY.task)} at length {length}: the model scored {len(token_lp)} tokens for a "
                  f"sample of {n} "
                  "(a request not built from this sample, e.g. replayed from a cache of another run)")
        return nan_results(reason, {ppl: (float("nan"), 1), nll: (float("nan"), 1)})
    if token_lp is not None:
        out[curve_key] = [-float(x) for x in token_lp]
    return out


def _pooled_nll(items: Sequence[Sequence[float]]) -> float:
    total = sum(float(nll) for nll, _ in items)
    count = sum(int(n) for _, n in items)
    return total / count if count else float("nan")


def agg_token_nll(items: Sequence[Sequence[float]]) -> float:
    """Mean token negative log-likelihood over all scored tokens (nats)."""
    return _pooled_nll(items)


def agg_ppl(items: Sequence[Sequence[float]]) -> float:
    """``exp`` of the mean token NLL over all scored tokens."""
    nll = _pooled_nll(items)
    return math.exp(nll) if math.isfinite(nll) else float("nan")


def position_curve(curves: Sequence[Optional[Sequence[float]]]) -> List[float]:
    """Mean NLL at each position across samples (samples of equal length; ``None`` entries make it empty)."""
    valid = [c for c in curves if c is not None]
    if not valid or len(valid) != len(curves):
        return []
    n = len(valid[0])
    if any(len(c) != n for c in valid):
        raise ValueError(f"per-position curves of different lengths: {sorted({len(c) for c in valid})}")
    return [sum(c[i] for c in valid) / len(valid) for i in range(n)]


def agg_curve_mean_nll(items: Sequence[Optional[Sequence[float]]]) -> float:
    """Mean over positions of the per-position mean NLL (equals ``token_nll`` when every sample has the same
    length); NaN when some sample has no per-token values."""
    curve = position_curve(items)
    return sum(curve) / len(curve) if curve else float("nan")
