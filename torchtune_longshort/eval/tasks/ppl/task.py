"""Long-context perplexity as an lm-eval task (``evals/tasks/long_ppl``): data, scoring, per-position curve.

The task ``long_ppl`` scores, at each length ``L`` of its ``max_seq_lengths`` metadata (``ppl_max_seq_lengths``
when set), ``num_samples`` sequences of exactly ``L`` tokens, one per document (each
document truncated to ``L`` tokens, as YaRN and CLEX report PG19 perplexity). A sample is one ``loglikelihood``
request with an empty context, so the model sees ``[BOS] + x[:-1]`` and predicts all ``L`` tokens of ``x`` in one
window (no rolling windows, no truncation); lm-eval's ``hf`` model and ``longshort`` score it identically.

    ppl_L = exp( sum_docs sum_t NLL(x_t) / sum_docs L )      (metric ppl_<L>, e.g. ppl_4k; also token_nll_<L>)

With the ``longshort`` model the result also carries per-token log-probabilities; ``process_results`` returns them
as the ``curve_mean_nll_<L>`` item (lm-eval writes them to its samples file with ``--log_samples``) and the report turns
them into a per-position loss curve (CSV + PNG). The curve's mean over positions equals ``log(ppl_L)``.

Task metadata (YAML ``metadata`` defaults, overridden by ``--metadata '{...}'``):
    ppl_source: stdlib | pg19 | hf | local        ppl_data_files: path/glob (.txt, .jsonl/.json with ppl_text_field)
    ppl_dataset_path / ppl_dataset_name / ppl_split / ppl_text_field: for ppl_source=hf
    ppl_num_samples (default 20), ppl_chunks_per_doc (default 1)
    max_seq_lengths / ppl_max_seq_lengths: the lengths (default in the task YAML)
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from torchtune_longshort.eval.lengths import lengths_from_metadata, per_length
from torchtune_longshort.eval.length_swept_task import sweep_dataset
from torchtune_longshort.eval.long_text import fixed_length_samples, texts_from_metadata, tokenizer_from_metadata
from torchtune_longshort.eval.unavailable import check_fits_model, nan_results, reason_of, refusal_of

logger = logging.getLogger(__name__)
# The prefix of this task's metadata keys (ppl_source, ppl_max_seq_lengths, ...).
METADATA_PREFIX = "ppl"


def long_ppl_dataset(**metadata: Any):
    """lm-eval ``custom_dataset`` of ``long_ppl``: a ``test`` split of fixed-length samples at each length of
    ``ppl_max_seq_lengths`` / ``max_seq_lengths`` (:func:`lengths.lengths_from_metadata`).

    Rows: ``text`` (exactly ``length`` tokens), ``n_tokens``, ``length``, ``doc_index``, ``start``, ``source``,
    ``error`` (empty, or the reason this length cannot run: then the row is a placeholder scored NaN).
    """
    source = str("local" if metadata.get("ppl_data_files") else metadata.get("ppl_source", "stdlib"))

    def rows_at(length: int) -> List[Dict[str, Any]]:
        # BOS + L tokens: the model runs L positions (it predicts the first token from BOS alone)
        check_fits_model(length, metadata)
        tok = tokenizer_from_metadata(metadata)
        texts = texts_from_metadata(metadata, METADATA_PREFIX, min_chars=length // 2)
        samples = fixed_length_samples(texts, tok, length, num_samples=int(metadata.get("ppl_num_samples", 20)),
                                       chunks_per_doc=int(metadata.get("ppl_chunks_per_doc", 1)))
        return [{"text": s.text, "n_tokens": len(s.token_ids), "length": length, "doc_index": s.doc_index,
                 "start": s.start, "source": source} for s in samples]

    def placeholder_row(length: int) -> Dict[str, Any]:
        return {"text": " ", "n_tokens": 0, "length": length, "doc_index": -1, "start": -1, "source": source}

    return sweep_dataset("long_ppl", lengths_from_metadata(metadata, METADATA_PREFIX), rows_at, placeholder_row)


def process_results(doc: Dict[str, Any], results: Sequence[Any]) -> Dict[str, Any]:
    """Per-sample items at the row's length ``L``: ``(nll_sum, n_tokens)`` for ``ppl_<L>`` / ``token_nll_<L>`` and
    the per-token NLL list (or None when the model does not return it) for ``curve_mean_nll_<L>``; NaN and the
    reason (metric ``error``) for a placeholder row or a request the model refused."""
    res = results[0]
    reason = reason_of(doc) or refusal_of(res)
    names = [per_length(m, int(doc["length"])) for m in ("ppl", "token_nll", "curve_mean_nll")]
    if reason:
        nan = (float("nan"), 1)
        return nan_results(reason, dict(zip(names, (nan, nan, None))))
    logprob = float(res[0])
    n = int(doc["n_tokens"])
    token_lp = getattr(res, "token_logprobs", None)
    curve = [-float(x) for x in token_lp] if token_lp is not None and len(token_lp) == n else None
    return dict(zip(names, ((-logprob, n), (-logprob, n), curve)))


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
    length); NaN when the model gave no per-token values (e.g. lm-eval's ``hf`` model)."""
    curve = position_curve(items)
    return sum(curve) / len(curve) if curve else float("nan")


def curves_figure(curves: Mapping[str, Mapping[int, Sequence[float]]], bucket: int = 0):
    """Per-position mean NLL, one line per run and length (see :func:`write_curves`), as a matplotlib Figure;
    plain-number NLL ticks without an offset (:func:`plot_axes.value_axis`)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import value_axis

    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    ys_all: List[float] = []
    for run, by_len in curves.items():
        for length, curve in sorted(by_len.items()):
            b = bucket or max(1, len(curve) // 200)
            xs = [i + b / 2 for i in range(0, len(curve), b)]
            ys = [sum(curve[i : i + b]) / len(curve[i : i + b]) for i in range(0, len(curve), b)]
            ax.plot(xs, ys, label=f"{run} L={length}")
            ys_all += ys
    value_axis(ax, ys_all, log_span=float("inf"))
    ax.set_xlabel("position (tokens)")
    ax.set_ylabel("mean NLL (nats)")
    ax.set_title("Per-position loss")
    if ys_all:
        ax.legend(fontsize=7)
    return fig


def write_curves(curves: Mapping[str, Mapping[int, Sequence[float]]], out_dir: Path, bucket: int = 0) -> Dict[str, Path]:
    """Write per-position loss curves: ``per_position_loss.csv`` (run, length, position, mean_nll) and a PNG.

    Args:
        curves: ``{run label: {length: per-position mean NLL}}``.
        bucket: average this many positions per plotted point (0: about 200 points per curve).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "per_position_loss.csv"
    with csv_path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "length", "position", "mean_nll"])
        for run, by_len in curves.items():
            for length, curve in sorted(by_len.items()):
                for pos, v in enumerate(curve):
                    w.writerow([run, length, pos, f"{v:.6f}"])
    png = out_dir / "per_position_loss.png"
    curves_figure(curves, bucket).savefig(png, dpi=120)
    return {"csv": csv_path, "png": png}
