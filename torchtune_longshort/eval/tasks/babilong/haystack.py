"""BABILong samples: a bAbI story hidden in haystack text, fitted to a length in tokens of a given tokenizer.

The haystack half of the BABILong generator (:mod:`torchtune_longshort.eval.tasks.babilong.generator`):

* a haystack from any text corpus (:func:`iter_haystack_lines`);
* lengths in tokens: a sample's ``input`` (haystack + facts) is ``length_tokens`` long within the stated
  tolerance (:func:`within_length_tolerance`); ``"0k"`` means the facts alone; or, given the task's prompt
  (:mod:`.prompt`), the whole request (BOS, prompt, question, generation budget) is at most ``length_tokens``;
* placement: ``depth=None`` scatters the facts in order over the haystack at random (BABILong's way);
  ``depth=d`` puts the story block so that ``d`` % of the haystack's tokens come before it, measured by
  tokenizing the text before the block (stored as ``depth_measured``, see :func:`within_depth_tolerance`).
"""

from __future__ import annotations

import random
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Protocol, Tuple

from torchtune_longshort.data import corpus
from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents
from torchtune_longshort.data.file_paths import resolve_files
from torchtune_longshort.data.source_names import haystack_names, source_names
from torchtune_longshort.data.text_files import iter_documents
from torchtune_longshort.eval.tasks.babilong.stories import Story
from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.eval.tasks.common.long_text import readable_texts
from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer

# BABILong's length labels and the token counts we build them to (labels: eval.lengths, "1k" = 1024 tokens).
LENGTHS: Dict[str, int] = {length_label(n): n for n in (0, *(1024 * 2**i for i in range(8)))}
DEPTHS = (0, 25, 50, 75, 100)
# What a haystack may be (:func:`iter_haystack_lines`), as the generator's --haystack and the study's
# eval.babilong.haystack say it; a glob's ** is recursive (glob.glob(..., recursive=True)), so it matches no folder too
HAYSTACK_FORMS = "stdlib | pg19 | a .txt file, a folder of .txt files, or a glob"
GLOB_EXAMPLE = "('./books/**/*.txt': ** is any folders, none included)"
# Stated length tolerance: |tokens(input) - target| <= LENGTH_TOLERANCE_FRAC * target + LENGTH_TOLERANCE_TOKENS.
LENGTH_TOLERANCE_FRAC = 0.01
LENGTH_TOLERANCE_TOKENS = 8
# Stated depth tolerance: |depth_measured - depth/100| <= DEPTH_TOLERANCE_FRAC + DEPTH_TOLERANCE_TOKENS / haystack
# tokens (the block goes in at a word boundary, and one source word can be many tokens).
DEPTH_TOLERANCE_FRAC = 0.02
DEPTH_TOLERANCE_TOKENS = 8
# The fitting loop stops once the input is this close to the target (tokens), or after this many tries.
FIT_EXACT_TOKENS = 2
FIT_MAX_TRIES = 12

CountTokens = Callable[[str], int]
Segments = Tuple[List[str], List[int]]  # the input's lines, and the indices of the fact (or block) lines


class RequestPrompt(Protocol):
    """What :func:`build_sample` asks of a task's prompt: its generation budget, its style (``babilong_prompt``), and
    the tokens the whole request for a row takes (:class:`~torchtune_longshort.eval.tasks.babilong.prompt.TaskPrompt`
    measures both with lm-eval)."""

    max_gen_toks: int
    style: str

    def request_tokens(self, input_text: str, question: str, count_tokens: CountTokens) -> int: ...


def load_token_counter(tokenizer: str, trust_remote_code: Optional[bool] = None,
                       label: str = "tokenizer") -> Callable[[str], int]:
    """``text -> number of tokens`` (special tokens not counted) for a tokenizer folder or file of any format the
    project reads, or a Hugging Face tokenizer name
    (:class:`~torchtune_longshort.eval.tasks.common.token_sequences.TaskTokenizer`, ``trust_remote_code`` as it takes
    it; ``label``: the name a refusal gives it)."""
    tok = TaskTokenizer(tokenizer, trust_remote_code, label)
    return lambda text: len(tok.encode(text))


def iter_haystack_lines(haystack: str = "stdlib", label: str = "haystack") -> Iterator[str]:
    """Non-empty, stripped lines of a corpus, forever (the corpus is cycled).

    ``haystack``: ``"stdlib"`` (the Python standard library's source), ``"pg19"`` (PG19's test split,
    ``corpus.pg19``: ``emozilla/pg19``, streamed; needs the hub or its cache), or local text: a file, a glob or a
    folder of ``.txt`` files (read by :mod:`torchtune_longshort.data.text_files`). A record that cannot be read (a
    PG19 row whose text is no string) is skipped with a warning: the haystack is filler, no score depends on which
    record. ``label``: the name a refusal gives it (the generator's ``--haystack``).
    """
    passes = 0
    while True:
        n = 0
        for line in _one_pass(haystack, label, warn=not passes):  # a later pass skips the same records: said once
            n += 1
            yield line
        if n == 0:
            raise ValueError(f"{label}={haystack!r} has no non-empty lines")
        passes += 1


def short_local_haystack(haystack: str, max_chars: int) -> Optional[str]:
    """A local haystack's whole text (its lines, one pass, joined by spaces) when it holds fewer than ``max_chars``
    characters, else None (``"stdlib"``, ``"pg19"``: long corpora, never read here)."""
    if haystack in ("stdlib", "pg19"):
        return None
    lines, size = [], 0
    for line in _one_pass(haystack):
        lines.append(line)
        size += len(line) + 1
        if size >= max_chars:
            return None
    return " ".join(lines)


def _one_pass(haystack: str, label: str = "haystack", warn: bool = True) -> Iterator[str]:
    """The non-empty, stripped lines of one pass over the haystack (see :func:`iter_haystack_lines`); ``warn``: each
    skipped record is warned about (not on a pass after the first)."""
    if haystack == "stdlib":
        docs: Iterable[str] = iter_stdlib_documents(include_tests=False)
    elif haystack == "pg19":
        local = f"{label} <a .txt file, a folder of them or a glob>"  # what a local haystack reads: .txt files
        with source_names(haystack_names(label, f"a local haystack ({local})", (
                f"save the books' text as .txt files and name them: {local} (each file read whole as one text)"))):
            docs = corpus.pg19(split="test", check_first=False, skip_bad_records=True)()
    else:
        docs = iter_documents(haystack_files(haystack, label), encoding_errors="replace")
    for doc in readable_texts(docs, "", f"{label}={haystack!r}", warn=warn):  # as its refusals name it
        for line in doc.splitlines():
            line = line.strip()
            if line:
                yield line


def haystack_files(haystack: str, label: str = "haystack") -> List:
    """The ``.txt`` files a local haystack (a file, a folder or a glob) names (``resolve_files``); one that names
    nothing is refused (``FileNotFoundError``, one line naming ``label``) with the haystacks accepted."""
    try:
        return resolve_files(haystack, (".txt",), label)
    except FileNotFoundError as e:
        accepted = "'stdlib', 'pg19', a text file, a glob or a folder of .txt files"
        raise FileNotFoundError(f"{e}; accepted: {accepted}") from None


def within_length_tolerance(n_tokens: int, target: int) -> bool:
    """The stated tolerance on a sample's ``input`` length in tokens."""
    return abs(n_tokens - target) <= LENGTH_TOLERANCE_FRAC * target + LENGTH_TOLERANCE_TOKENS


def within_depth_tolerance(depth_measured: float, depth: int, haystack_tokens: int) -> bool:
    """The stated tolerance on where the story block lands (fractions of the haystack's tokens)."""
    return abs(depth_measured - depth / 100) <= DEPTH_TOLERANCE_FRAC + DEPTH_TOLERANCE_TOKENS / max(haystack_tokens, 1)


def parse_length(length: str) -> int:
    """A BABILong length label (``"0k"`` .. ``"128k"``) -> its token count."""
    if length not in LENGTHS:
        raise ValueError(f"length={length!r} is not a BABILong length; accepted: {list(LENGTHS)}")
    return LENGTHS[length]


# ------------------------------------------------------------------------------------------------ samples


class _LinePool:
    """Haystack lines with their token counts, drawn once from ``lines`` and reused while the budget is
    corrected (so every try of one sample sees the same text)."""

    def __init__(self, lines: Iterator[str], count_tokens: CountTokens):
        self._lines, self._count, self._pool = lines, count_tokens, []

    def __getitem__(self, i: int) -> Tuple[str, int]:
        while len(self._pool) <= i:
            ln = next(self._lines)
            self._pool.append((ln, self._count(ln)))
        return self._pool[i]


def _longest_fitting_prefix(words: List[str], room: int, count_tokens: CountTokens) -> int:
    """The most leading ``words`` whose joined text is at most ``room`` tokens (binary search)."""
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _fill_haystack(pool: _LinePool, budget: int, count_tokens: CountTokens) -> Tuple[List[str], List[int]]:
    """Whole pool lines up to ``budget`` tokens, the last one cut at a word boundary; lines and their counts."""
    hay, hay_tok, used, i = [], [], 0, 0
    while used < budget:
        ln, n = pool[i]
        i += 1
        if used + n > budget:
            words = ln.split()
            lo = _longest_fitting_prefix(words, budget - used, count_tokens)
            if lo:
                hay.append(" ".join(words[:lo]))
                hay_tok.append(count_tokens(hay[-1]))
            break
        hay.append(ln)
        hay_tok.append(n)
        used += n
    return hay, hay_tok


def _scatter_facts(hay: List[str], facts: List[str], fracs: List[float]) -> Segments:
    """Each fact in order after the haystack line at fraction ``fracs[j]`` of the lines (BABILong's way)."""
    cuts = [round(f * len(hay)) for f in fracs]
    segs, fseg, k = [], [], 0
    for j, fact in enumerate(facts):
        segs.extend(hay[k : cuts[j]])
        k = cuts[j]
        fseg.append(len(segs))
        segs.append(fact)
    segs.extend(hay[k:])
    return segs, fseg


def _place_at_depth(hay: List[str], hay_tok: List[int], block: str, depth: int, count_tokens: CountTokens) -> Segments:
    """Split the haystack where ``depth`` % of its tokens lie before the split (inside a line: at the word
    boundary closest to that token count), and put the story ``block`` there."""
    cum = [0]
    for n in hay_tok:
        cum.append(cum[-1] + n)
    want = depth / 100 * cum[-1]
    j = next((i for i in range(len(hay)) if cum[i + 1] > want), len(hay))
    if j == len(hay) or cum[j] == want:
        return hay[:j] + [block] + hay[j:], [j]
    words = hay[j].split()
    w = min(range(len(words) + 1), key=lambda m: abs(cum[j] + count_tokens(" ".join(words[:m])) - want))
    head, tail = " ".join(words[:w]), " ".join(words[w:])
    segs = hay[:j] + ([head] if head else [])
    k = len(segs)
    return segs + [block] + ([tail] if tail else []) + hay[j + 1 :], [k]


def _fit_to_length(
    story: Story, length: str, target: int, lines: Iterator[str], count_tokens: CountTokens, rng: random.Random,
    depth: Optional[int], measure: Optional[CountTokens] = None,
) -> Segments:
    """The input's segments (haystack lines and facts) whose joined text is closest to ``target`` tokens.

    Joining lines changes the token count a little (word pieces at the joins), so the whole text is measured
    and the haystack budget shifted by the error until the input is within ``FIT_EXACT_TOKENS`` of the target.
    ``measure`` (``input text -> tokens``; default: the input's own tokens) measures something else for an input,
    e.g. the whole request the task makes of it (:mod:`.prompt`): it must then be at most ``target``, as close to it
    as the tries find.
    """
    at_most = measure is not None
    measure = measure or count_tokens
    block = " ".join(story.facts)
    story_tokens = count_tokens(block)
    least = measure(block)  # the facts alone (and, measuring a request, its prompt around them)
    if least + LENGTH_TOLERANCE_TOKENS >= target:
        around = f" in a request of {least} tokens with its prompt" if at_most else ""
        raise ValueError(
            f"length={length!r} ({target} tokens) is too short for this {story.qa} story of {story_tokens} tokens"
            f"{around}; use a longer length (accepted: {[k for k, v in LENGTHS.items() if v > least]})"
        )
    pool = _LinePool(lines, count_tokens)
    fracs = sorted(rng.random() for _ in story.facts)
    budget = target - least
    best = None
    for attempt in range(FIT_MAX_TRIES * (2 if at_most else 1)):
        hay, hay_tok = _fill_haystack(pool, budget, count_tokens)
        if depth is None:
            segments, fact_seg = _scatter_facts(hay, story.facts, fracs)
        else:
            segments, fact_seg = _place_at_depth(hay, hay_tok, block, depth, count_tokens)
        err = measure("\n".join(segments)) - target
        fits = err <= 0 or not at_most
        if fits and (best is None or abs(err) < abs(best[0])):
            best = (err, segments, fact_seg)
        if fits and abs(err) <= FIT_EXACT_TOKENS:
            break
        if attempt + 1 >= FIT_MAX_TRIES and best is not None:
            break  # the extra tries are only for a request that has not fitted yet
        # Halve the correction once the error changes sign (a whole line entering or leaving); a request over its
        # budget always comes down by the whole excess.
        budget -= err if (not fits or best[0] == err) else max(1, abs(err) // 2) * (1 if err > 0 else -1)
    if best is None:
        raise ValueError(f"length={length!r}: no haystack of this {story.qa} story's request fitted {target} tokens "
                         f"in {2 * FIT_MAX_TRIES} tries")
    return best[1], best[2]


def _fact_char_offsets(segments: List[str], fact_seg: List[int], facts: List[str]) -> List[int]:
    """Character offsets in ``"\\n".join(segments)`` of each fact (scattered, one segment per fact) or, for one
    story block (depth / 0k), of each fact inside the block."""
    starts, pos = [], 0
    for s in segments:
        starts.append(pos)
        pos += len(s) + 1
    if len(fact_seg) == len(facts):
        return [starts[j] for j in fact_seg]
    offsets = [starts[fact_seg[0]]]
    for f in facts[:-1]:
        offsets.append(offsets[-1] + len(f) + 1)
    return offsets


def build_sample(
    story: Story,
    length: str,
    lines: Iterator[str],
    count_tokens: CountTokens,
    rng: random.Random,
    depth: Optional[int] = None,
    prompt: Optional[RequestPrompt] = None,
) -> Dict:
    """One BABILong-format row: ``story`` hidden in haystack ``lines`` to ``length`` tokens (see module doc).

    ``prompt`` (the task's :class:`~torchtune_longshort.eval.tasks.babilong.prompt.TaskPrompt`): the whole request
    the task makes of the row (BOS, lm-eval's prompt around the input, the question, the generation budget) is
    sized to at most ``length`` tokens instead of the input alone; the row then also holds ``prompt_tokens`` (BOS +
    prompt), ``max_gen_toks`` and the prompt's style, ``babilong_prompt``.

    Raises ``ValueError`` when the facts alone are longer than the requested length, or for a depth outside
    0..100 or with ``"0k"`` (no haystack).
    """
    target = parse_length(length)
    if depth is not None and not (isinstance(depth, int) and 0 <= depth <= 100):
        raise ValueError(f"depth={depth!r}; accepted: an integer percentage 0..100 (e.g. {list(DEPTHS)})")
    block = " ".join(story.facts)
    measure = None
    if prompt is not None:
        measure = lambda text: prompt.request_tokens(text, story.question, count_tokens)  # noqa: E731
    if target == 0:
        if depth is not None:
            raise ValueError("depth is set but length='0k' has no haystack to place the facts in; use depth=None")
        segments, fact_seg = [block], [0]
    else:
        segments, fact_seg = _fit_to_length(story, length, target, lines, count_tokens, rng, depth, measure)
    text = "\n".join(segments)
    offsets = _fact_char_offsets(segments, fact_seg, story.facts)
    row = {
        "input": text,
        "question": story.question,
        "target": story.answer,
        "qa": story.qa,
        "length": length,
        "length_tokens": target,
        "n_tokens": count_tokens(text),
        "depth": depth,
        "facts": story.facts,
        "fact_char_offsets": offsets,
        "supporting_facts": story.supporting,
    }
    if prompt is not None:
        row["max_gen_toks"] = prompt.max_gen_toks
        row["prompt_tokens"] = measure(text) - prompt.max_gen_toks
        row["babilong_prompt"] = prompt.style
    if depth is not None:
        hay_total = row["n_tokens"] - count_tokens(block)
        before = count_tokens(text[: offsets[0]]) if offsets[0] else 0
        row["depth_measured"] = before / hay_total if hay_total else 0.0
    return row
