"""Passkey retrieval (the check used by Landmark Attention, YaRN, LongLoRA and CLEX) as an lm-eval task.

A prompt of a target length (in the model's tokens) hides ``The pass key is NNNNN. Remember it. NNNNN is the pass
key.`` at a chosen depth of a haystack, then asks ``What is the pass key? The pass key is``; the answer is right
when the first number in the greedy continuation equals the key. The prompt text is LongLoRA's
``passkey_retrieval.py``; the haystack is its repeated filler by default, or text from any corpus.

The task ``longshort_passkey`` (not ``passkey``, which is lm-eval's own libra group) holds, at each length ``L``
of its ``max_seq_lengths`` metadata (``passkey_max_seq_lengths`` when set), ``len(depths) x passkey_num_samples``
prompts of at most ``L - 16`` tokens (BOS included), leaving 16 tokens to generate within ``L``. Scores: ``acc``,
``acc_<L>``, ``acc_d<depth>`` and ``acc_<L>_d<depth>`` (depth in percent), as ``longshort_babilong`` reports them,
and the same for ``digits`` (the fraction of the key's digits in place: graded retrieval for small models).

Task metadata (YAML defaults, ``--metadata`` overrides): ``passkey_depths`` (default [0, 25, 50, 75, 100]),
``passkey_num_samples`` (per depth, default 5), ``passkey_haystack`` (filler | stdlib | stdlib_tests | stdlib_heldout
| local | pg19: ``PASSKEY_HAYSTACKS``), ``passkey_haystack_files`` (for local), ``passkey_data_files`` (JSONL of prompts
already made by :func:`write_passkey_jsonl`: then nothing is generated), ``passkey_seed``.
"""

from __future__ import annotations

import json
import logging
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from torchtune_longshort.data.source_names import haystack_names
from torchtune_longshort.eval.tasks import PASSKEY_DEFAULTS, TASK_FAMILIES
from torchtune_longshort.eval.tasks.common.lengths import lengths_from_metadata, per_depth, per_length, percentages
from torchtune_longshort.eval.tasks.common.pack_task import sweep_dataset
from torchtune_longshort.eval.tasks.common.long_text import iter_texts, warn_trained_text
from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer, tokenizer_from_metadata
from torchtune_longshort.eval.model.limits import TRUNCATION_FIELD
from torchtune_longshort.eval.tasks.common.unavailable import (
    TaskDataError, check_fits_model, nan_results, reason_of, refusal_of,
)
from torchtune_longshort.plural import counted

logger = logging.getLogger(__name__)
FAMILY = TASK_FAMILIES["passkey"]
# The prefix of this task's metadata keys (passkey_haystack, passkey_max_seq_lengths, ...).
METADATA_PREFIX = FAMILY.metadata_prefix

TASK_DESCRIPTION = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there."
)
# How a haystack read from the hub that cannot be reached names the local ones (docs/eval.md: passkey_haystack).
PASSKEY_LOCAL_FILES = ("local files (passkey_haystack=local with passkey_haystack_files=<path or glob> in --metadata, "
                       "or passkey_haystack=filler)")
# How a hub haystack's messages name its key and the local form that reads (and skips) what it cannot
PASSKEY_NAMES = haystack_names("passkey_haystack", PASSKEY_LOCAL_FILES, (
    "read the same files with passkey_haystack=local with passkey_haystack_files=<them> in --metadata (read by the "
    "task's own reader, which skips such records)"))
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "What is the pass key? The pass key is"
GEN_BUDGET = 16
DEFAULT_DEPTHS = tuple(PASSKEY_DEFAULTS["depths"])
# The ``digits`` score of guessing: each place of the key holds one of 10 digits, so random digits put 1 in 10 in
# place (the chance level that figures and reports draw for this metric).
DIGITS_CHANCE = 1 / 10


def needle(passkey: int) -> str:
    """The sentence that carries the key."""
    return f"The pass key is {passkey}. Remember it. {passkey} is the pass key."


@dataclass
class PasskeySample:
    """One prompt: ``input`` text, ``answer`` (the key, as text), its target ``length`` and requested ``depth``
    (percent), and what was measured: ``n_tokens`` (BOS included) and ``depth_actual`` (percent of the haystack's
    tokens before the needle)."""

    input: str
    answer: str
    length: int
    depth: int
    n_tokens: int
    depth_actual: float
    error: str = ""
    # A cut passkey prompt can keep a needle near its end and inflate the score: never truncate, refuse.
    prompt_truncation: str = "none"


def _prompt(units: Sequence[str], k: int, passkey: int) -> str:
    prefix = " ".join(units[:k])
    suffix = " ".join(units[k:])
    return "\n".join([TASK_DESCRIPTION, prefix, needle(passkey), suffix, QUESTION])


def haystack_units(source: str = "filler", data_files: Any = None, max_units: int = 1_000_000) -> List[str]:
    """Haystack pieces: the filler sentence group repeated (``filler``), or the non-empty lines of a corpus
    (``stdlib`` / ``pg19`` / ``hf`` / ``local``: see :func:`torchtune_longshort.eval.tasks.common.long_text.iter_texts`;
    a record that cannot be read is skipped with a warning: the haystack is filler)."""
    if source == "filler" and not data_files:
        # One sentence per unit, so the needle can sit between any two sentences (finer depth steps).
        sentences = [x.strip() + "." for x in FILLER.split(".") if x.strip()]
        return (sentences * (max_units // len(sentences) + 1))[:max_units]
    units: List[str] = []
    for text in iter_texts(source=source, data_files=data_files, skip_bad_records=True,
                           files_setting="passkey_haystack_files", haystack=PASSKEY_NAMES):
        for line in text.splitlines():
            line = line.strip()
            if line:
                units.append(line)
                if len(units) >= max_units:
                    return units
    if not units:
        raise TaskDataError(f"passkey_haystack={source!r} gave no text: name another haystack (filler, the default, "
                            "reads no data)")
    return units


def make_passkey_sample(
    tokenizer: TaskTokenizer, length: int, depth: int, passkey: int, units: Sequence[str]
) -> PasskeySample:
    """Build a prompt of at most ``length - GEN_BUDGET`` tokens (with BOS) with the needle at ``depth`` percent.

    The number of haystack units is the largest that fits (found by bisection on the exact token count), so the
    prompt falls short of the budget by less than one unit. Raises ``TaskDataError`` when even an empty haystack
    does not fit.
    """
    if not 0 <= depth <= 100:
        raise TaskDataError(f"depth={depth} must be a percentage in [0, 100]")
    budget = length - GEN_BUDGET

    def n_tokens(n: int) -> int:
        return 1 + len(tokenizer.encode(_prompt(units[:n], round(depth / 100 * n), passkey)))

    if n_tokens(0) > budget:
        raise TaskDataError(
            f"length={length}: the passkey prompt without haystack already has {n_tokens(0)} tokens, and "
            f"{GEN_BUDGET} more are kept for the answer: passkey lengths start at {n_tokens(0) + GEN_BUDGET} tokens "
            "with this tokenizer"
        )
    lo, hi = 0, 1
    while hi <= len(units) and n_tokens(hi) <= budget:
        lo, hi = hi, hi * 2
    hi = min(hi, len(units) + 1)
    if hi == len(units) + 1 and n_tokens(len(units)) <= budget:
        raise TaskDataError(
            f"length={length}: the haystack has only {len(units)} units ({n_tokens(len(units))} tokens); "
            "use a longer haystack source"
        )
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if n_tokens(mid) <= budget:
            lo = mid
        else:
            hi = mid
    n = lo
    k = round(depth / 100 * n)
    text = _prompt(units[:n], k, passkey)
    before = 1 + len(tokenizer.encode("\n".join([TASK_DESCRIPTION, " ".join(units[:k])])))
    head = 1 + len(tokenizer.encode(TASK_DESCRIPTION))
    total = 1 + len(tokenizer.encode(text))
    hay = total - head - len(tokenizer.encode(needle(passkey))) - len(tokenizer.encode(QUESTION))
    depth_actual = 100.0 * (before - head) / hay if hay > 0 else 0.0
    return PasskeySample(text, str(passkey), length, depth, total, round(depth_actual, 2))


def make_passkey_samples(
    tokenizer: TaskTokenizer,
    length: int,
    depths: Iterable[int] = DEFAULT_DEPTHS,
    num_samples: int = 5,
    seed: int = 0,
    units: Optional[Sequence[str]] = None,
) -> List[PasskeySample]:
    """``num_samples`` prompts per depth at one length; keys are 5-digit numbers drawn from ``seed``."""
    units = units if units is not None else haystack_units()
    return [make_passkey_sample(tokenizer, length, depth, key, units)
            for depth, key in _depths_and_keys(length, depths, num_samples, seed)]


def _depths_and_keys(length: int, depths: Iterable[int], num_samples: int, seed: int) -> List[tuple]:
    """``(depth, key)`` of each sample of ``length``, in order: ``num_samples`` per depth, keys from ``seed``."""
    rng = random.Random(f"{seed}-{length}")
    return [(int(depth), rng.randint(10_000, 99_999)) for depth in depths for _ in range(num_samples)]


def depths_of(metadata: Mapping[str, Any]) -> List[float]:
    """``passkey_depths`` (a list, or a comma list as ``max_seq_lengths`` takes: :func:`percentages`), else the
    default; :class:`TaskDataError` for a value that is neither."""
    given = metadata.get("passkey_depths")
    if given in (None, "", []):
        return list(DEFAULT_DEPTHS)
    depths = percentages(given)
    if depths is None:
        raise TaskDataError(f"passkey_depths={given!r}: expected percentages in [0, 100]: a list or a comma list, e.g. "
                            "[0, 50, 100] or \"0,50,100\"")
    return depths


def _sample_settings(metadata: Mapping[str, Any]) -> Dict[str, Any]:
    """:func:`make_passkey_samples`' ``depths``, ``num_samples`` and ``seed`` from the task's metadata."""
    return {"depths": depths_of(metadata),
            "num_samples": int(metadata.get("passkey_num_samples", 5)),
            "seed": int(metadata.get("passkey_seed", PASSKEY_DEFAULTS["seed"]))}


def write_passkey_jsonl(samples: Iterable[PasskeySample], path: Path) -> Path:
    """Write samples as JSONL (the local-data format of the passkey task)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for s in samples:
            f.write(json.dumps(asdict(s)) + "\n")
    return path


def _rows_from_files(files: Any, length: int, placeholder: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The samples of ``length`` in ``passkey_data_files`` (JSONL written by :func:`write_passkey_jsonl`)."""
    rows = []
    for f in [files] if isinstance(files, str) else files:
        p = Path(f)
        if not p.is_file():
            raise TaskDataError(f"passkey_data_files={str(f)!r}: no such file: name files that exist")
        for line in p.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                if int(row.get("length", -1)) == length:
                    rows.append({**placeholder, **row, TRUNCATION_FIELD: "none"})
    if not rows:
        raise TaskDataError(f"passkey_data_files={files!r} holds no sample with length={length}: write "
                            "samples of that length (write_passkey_jsonl), or ask for the lengths it holds "
                            "(passkey_max_seq_lengths)")
    return rows


def _placeholder_row(length: int) -> Dict[str, Any]:
    return asdict(PasskeySample(" ", "0", length, -1, 0, 0.0))


def passkey_dataset(**metadata: Any):
    """lm-eval ``custom_dataset`` of ``longshort_passkey``: prompts at each length of ``passkey_max_seq_lengths`` /
    ``max_seq_lengths`` (see the module docstring for the other metadata keys)."""

    def rows_at(length: int) -> List[Dict[str, Any]]:
        if metadata.get("passkey_data_files"):
            return _rows_from_files(metadata["passkey_data_files"], length, _placeholder_row(length))
        haystack = metadata.get("passkey_haystack", PASSKEY_DEFAULTS["haystack"])
        if not metadata.get("passkey_haystack_files"):  # a stdlib haystack the checkpoint trained on: said once
            warn_trained_text(metadata, haystack, "passkey_haystack")
        units = haystack_units(haystack, metadata.get("passkey_haystack_files"))
        samples = make_passkey_samples(tokenizer_from_metadata(metadata), length, units=units,
                                       **_sample_settings(metadata))
        return [asdict(s) for s in samples]

    def placeholders(length: int) -> List[Dict[str, Any]]:  # a length not run: NaN in each of its depth cells too
        if metadata.get("passkey_data_files"):
            return [_placeholder_row(length)]  # the files' depths are not known without them
        return [{**_placeholder_row(length), "depth": int(d)} for d in depths_of(metadata)]

    return sweep_dataset(FAMILY.task, lengths_from_metadata(metadata, METADATA_PREFIX), rows_at, placeholders,
                         fits=lambda length: check_fits_model(length, metadata))


def check_haystack_fills(metadata: Mapping[str, Any]) -> None:
    """Before a run (``metadata``: the model's arguments and ``--metadata`` merged, over the task YAML's): raise
    :class:`TaskDataError` when a haystack read from ``passkey_haystack_files`` is too short for a sample of the
    longest length the task would build (one the model runs), told by the model's tokenizer when it is a local file
    or folder. The task found it at building, once the model had loaded, and scored that length NaN (exit 0)."""
    files = metadata.get("passkey_haystack_files")
    if not files or metadata.get("passkey_data_files"):
        return
    # deferred: lm-eval's YAML loader (the task's own defaults: its lengths when --metadata gives none)
    from lm_eval.tasks._yaml_loader import load_yaml

    yaml = load_yaml(Path(__file__).with_name(f"{FAMILY.task}.yaml"), resolve_func=False)
    metadata = {**yaml.get("metadata", {}), **metadata}
    path = next((str(metadata[k]) for k in ("tokenizer", "checkpoint_dir", "pretrained") if metadata.get(k)), "")
    lengths = [n for n in lengths_from_metadata(metadata, METADATA_PREFIX) if _fits(n, metadata)]
    if not path or not Path(path).expanduser().exists() or not lengths:
        return  # a hub tokenizer (no download here) or no length to build: the task tells
    length = max(lengths)
    budget, most = length - GEN_BUDGET, 4 * length  # each line is at least one token: 4x is more than enough
    units = haystack_units(metadata.get("passkey_haystack", PASSKEY_DEFAULTS["haystack"]), files, max_units=most)
    tokenizer = TaskTokenizer(path)

    def n_tokens(n: int, depth: int, key: int) -> int:
        return 1 + len(tokenizer.encode(_prompt(units[:n], round(depth / 100 * n), key)))

    cells = _depths_and_keys(length, **_sample_settings(metadata))
    n = 1  # doubling, as make_passkey_sample finds its haystack: a few short encodings
    while n < len(units) and n_tokens(n, *cells[0]) <= budget + 16:  # 16: room for the other keys' tokens
        n *= 2
    if n < len(units) or len(units) >= most:
        return
    total = min(n_tokens(len(units), depth, key) for depth, key in cells)  # each sample, as the task builds them
    if total <= budget:
        raise TaskDataError(
            f"passkey_haystack_files={files!r}: its haystack ({counted(len(units), 'line')}) makes a passkey prompt of "
            f"{total} tokens with this tokenizer, and length {length} needs one of more than {budget} ({GEN_BUDGET} "
            f"kept for the answer): give a haystack of more text, or shorter lengths "
            f"({METADATA_PREFIX}_max_seq_lengths)")


def _fits(length: int, metadata: Mapping[str, Any]) -> bool:
    try:
        check_fits_model(length, metadata)
    except TaskDataError:
        return False
    return True


_NUMBER = re.compile(r"\d+")


def digit_accuracy(generated: str, key: str) -> float:
    """Graded retrieval: the fraction of the key's digits that the first number of ``generated`` has at the same
    place (``71155`` for ``71957``: 3 of 5). 0 without a number; a guess of random digits scores :data:`DIGITS_CHANCE`
    on average."""
    m = _NUMBER.search(generated or "")
    if m is None:
        return 0.0
    return sum(a == b for a, b in zip(m.group(0), key)) / len(key)


def process_results(doc: Dict[str, Any], results: Sequence[str]) -> Dict[str, float]:
    """``acc`` (1.0 when the first number in the generation is the key) and ``digits``
    (:func:`digit_accuracy`, which shows retrieval a small model has only partly learned), each also per length
    and depth (``acc_<length>``, ``acc_d<depth>``, ``acc_<length>_d<depth>``, as ``longshort_babilong``).

    A placeholder row or a prompt the model refused (never scored as wrong) gives NaN at its length
    (``acc_<length>``, ``acc_<length>_d<depth>``) and the reason (metric ``error``), and no value for the metrics
    pooled over lengths (``acc``, ``acc_d<depth>``): those are the mean over the lengths that were scored, the NaN
    per-length metrics name the others (before, one unscored length made ``acc`` NaN while ``acc_d<depth>`` averaged
    the rest)."""
    reason = reason_of(doc) or refusal_of(results[0])
    if reason:
        scores = {"acc": float("nan"), "digits": float("nan")}
    else:
        m = _NUMBER.search(results[0] or "")
        scores = {"acc": float(m is not None and m.group(0) == str(doc["answer"])),
                  "digits": digit_accuracy(results[0], str(doc["answer"]))}
    length, depth = int(doc["length"]), int(doc.get("depth", -1))
    out: Dict[str, float] = {}
    for name, v in scores.items():
        for n in [per_length(name, length)] + ([] if reason else [name]):
            out[n] = v
            if depth >= 0:
                out[per_depth(n, depth)] = v
    return nan_results(reason, out) if reason else out
