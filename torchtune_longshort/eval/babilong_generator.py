"""A generator of BABILong-style samples: bAbI QA1-QA5 stories hidden in a haystack of any text corpus.

BABILong (Kuratov et al., 2024) hides the facts of a bAbI task in long unrelated text and asks the bAbI
question. This module builds such samples offline and adds a *fact-depth* variant:

* a story simulator for QA1-QA5 (people, objects, locations, moves; relations for QA4; hand-overs for QA5)
  whose answers are correct by construction (the simulator's world state is the answer);
* a haystack from any text corpus: the standard library's source (default, always present), PG19
  (``"pg19"``, needs the Hugging Face dataset), or a local file or folder of ``.txt`` files;
* lengths in tokens of a given tokenizer: the sample's ``input`` (haystack + facts) is ``length_tokens``
  long within ``LENGTH_TOLERANCE`` (see :func:`within_length_tolerance`); ``"0k"`` means the facts alone;
* placement: ``depth=None`` scatters the facts in order over the haystack at random (BABILong's way);
  ``depth=d`` puts the story block so that ``d`` % of the haystack's tokens come before it, measured by
  tokenizing the text before the block (the result is stored as ``depth_measured``).

Rows are written in BABILong's own format (``input``, ``question``, ``target``) plus fields of ours
(``qa``, ``length``, ``depth``, ...), one file per length and task: ``<out>/<length>/<qa>.jsonl``, the
layout the ``babilong_longshort`` tasks read (``--metadata '{"babilong_data_dir": "<out>"}'``).
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from torchtune_longshort.eval.lengths import length_label

QA_TASKS = ("qa1", "qa2", "qa3", "qa4", "qa5")
# BABILong's length labels and the token counts we build them to (labels: eval.lengths, "1k" = 1024 tokens).
LENGTHS: Dict[str, int] = {length_label(n): n for n in (0, *(1024 * 2**i for i in range(8)))}
DEPTHS = (0, 25, 50, 75, 100)
# Stated length tolerance: |tokens(input) - target| <= LENGTH_TOLERANCE_FRAC * target + LENGTH_TOLERANCE_TOKENS.
LENGTH_TOLERANCE_FRAC = 0.01
LENGTH_TOLERANCE_TOKENS = 8
# Stated depth tolerance: |depth_measured - depth/100| <= DEPTH_TOLERANCE_FRAC + DEPTH_TOLERANCE_TOKENS / haystack
# tokens (the block goes in at a word boundary, and one source word can be many tokens).
DEPTH_TOLERANCE_FRAC = 0.02
DEPTH_TOLERANCE_TOKENS = 8

# BABILong's task label sets (its metrics.py TASK_LABELS): answers are always drawn from these.
LOCATIONS = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
QA1_3_PEOPLE = ("Mary", "John", "Daniel", "Sandra")
QA1_3_OBJECTS = ("apple", "football", "milk")
QA5_PEOPLE = ("Bill", "Fred", "Jeff", "Mary")
QA5_OBJECTS = ("apple", "football", "milk")
TASK_LABELS: Dict[str, frozenset] = {
    "qa1": frozenset(LOCATIONS), "qa2": frozenset(LOCATIONS), "qa3": frozenset(LOCATIONS),
    "qa4": frozenset(LOCATIONS), "qa5": frozenset(QA5_PEOPLE + QA5_OBJECTS),
}
MOVE_VERBS = ("moved to", "went to", "journeyed to", "travelled to", "went back to")
GRAB_VERBS = ("picked up", "got", "grabbed", "took")
DROP_VERBS = ("dropped", "put down", "discarded", "left")
GIVE_VERBS = ("gave", "handed", "passed")
DIRECTIONS = ("north", "south", "east", "west")


@dataclass
class Story:
    """A bAbI story: its sentences in order, the question and the answer (a label of the task)."""

    qa: str
    facts: List[str]
    question: str
    answer: str
    supporting: List[int] = field(default_factory=list)  # indices into ``facts``


def _check_qa(qa: str) -> None:
    if qa not in QA_TASKS:
        raise ValueError(f"qa={qa!r} is not supported; accepted: {list(QA_TASKS)}")


def _qa1(rng: random.Random) -> Story:
    where: Dict[str, str] = {}
    facts, last = [], {}
    for _ in range(rng.randint(4, 8)):
        p = rng.choice(QA1_3_PEOPLE)
        loc = rng.choice([l for l in LOCATIONS if l != where.get(p)])
        where[p] = loc
        last[p] = len(facts)
        facts.append(f"{p} {rng.choice(MOVE_VERBS)} the {loc}.")
    p = rng.choice(sorted(where))
    return Story("qa1", facts, f"Where is {p}?", where[p], [last[p]])


def _carry_world(rng: random.Random, n_events: int, people, objects):
    """Simulate moves, grabs and drops; yields (facts, object location histories, object supporting facts)."""
    where: Dict[str, str] = {}
    holder: Dict[str, Optional[str]] = {o: None for o in objects}
    obj_loc: Dict[str, Optional[str]] = {o: None for o in objects}
    history: Dict[str, List[str]] = {o: [] for o in objects}
    support: Dict[str, List[int]] = {o: [] for o in objects}
    facts: List[str] = []

    def note(o: str, loc: str, i: int) -> None:
        obj_loc[o] = loc
        if not history[o] or history[o][-1] != loc:
            history[o].append(loc)
        support[o].append(i)

    for _ in range(n_events):
        p = rng.choice(people)
        held = [o for o in objects if holder[o] == p]
        free_here = [o for o in objects if holder[o] is None and p in where and obj_loc[o] in (None, where[p])]
        kind = rng.choices(["move", "grab", "drop"], weights=[3, 2 if free_here else 0, 1 if held else 0])[0]
        i = len(facts)
        if kind == "move":
            loc = rng.choice([l for l in LOCATIONS if l != where.get(p)])
            where[p] = loc
            facts.append(f"{p} {rng.choice(MOVE_VERBS)} the {loc}.")
            for o in held:
                note(o, loc, i)
        elif kind == "grab":
            o = rng.choice(free_here)
            holder[o] = p
            facts.append(f"{p} {rng.choice(GRAB_VERBS)} the {o} there.")
            note(o, where[p], i)
        else:
            o = rng.choice(held)
            holder[o] = None
            facts.append(f"{p} {rng.choice(DROP_VERBS)} the {o}.")
            note(o, where[p], i)
    return facts, obj_loc, history, support


def _qa2(rng: random.Random) -> Story:
    while True:
        facts, obj_loc, _, support = _carry_world(rng, rng.randint(6, 10), QA1_3_PEOPLE, QA1_3_OBJECTS)
        known = sorted(o for o in QA1_3_OBJECTS if obj_loc[o] is not None)
        if known:
            o = rng.choice(known)
            return Story("qa2", facts, f"Where is the {o}?", obj_loc[o], support[o])


def _qa3(rng: random.Random) -> Story:
    while True:
        facts, _, history, support = _carry_world(rng, rng.randint(8, 12), QA1_3_PEOPLE, QA1_3_OBJECTS)
        moved = sorted(o for o in QA1_3_OBJECTS if len(history[o]) >= 2)
        if moved:
            o = rng.choice(moved)
            return Story("qa3", facts, f"Where was the {o} before the {history[o][-1]}?", history[o][-2], support[o])


_OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def _qa4(rng: random.Random) -> Story:
    a, b, c = rng.sample(LOCATIONS, 3)
    d1, d2 = rng.choice(DIRECTIONS), rng.choice(DIRECTIONS)
    facts = [f"The {a} is {d1} of the {b}.", f"The {b} is {d2} of the {c}."]
    order = [0, 1] if rng.random() < 0.5 else [1, 0]
    facts = [facts[i] for i in order]
    if rng.random() < 0.5:  # "What is d1 of b?" -> a
        return Story("qa4", facts, f"What is {d1} of the {b}?", a, [order.index(0)])
    return Story("qa4", facts, f"What is the {b} {d2} of?", c, [order.index(1)])


def _qa5(rng: random.Random) -> Story:
    while True:
        holder: Dict[str, Optional[str]] = {o: None for o in QA5_OBJECTS}
        facts: List[str] = []
        gives: List[Tuple[str, str, str, int]] = []  # (giver, object, receiver, fact index)
        for _ in range(rng.randint(4, 8)):
            free = [o for o in QA5_OBJECTS if holder[o] is None]
            held = [o for o in QA5_OBJECTS if holder[o] is not None]
            if held and (not free or rng.random() < 0.6):
                o = rng.choice(held)
                giver = holder[o]
                receiver = rng.choice([p for p in QA5_PEOPLE if p != giver])
                gives.append((giver, o, receiver, len(facts)))
                facts.append(f"{giver} {rng.choice(GIVE_VERBS)} the {o} to {receiver}.")
                holder[o] = receiver
            elif free:
                o, p = rng.choice(free), rng.choice(QA5_PEOPLE)
                holder[o] = p
                facts.append(f"{p} {rng.choice(GRAB_VERBS)} the {o}.")
        if not gives:
            continue
        giver, o, receiver, i = rng.choice(gives)
        kind = rng.choice(["who_gave", "to_whom", "what"])
        if kind == "who_gave":
            matches = [g for g in gives if g[1] == o and g[2] == receiver]
            if len(matches) == 1:
                return Story("qa5", facts, f"Who gave the {o} to {receiver}?", giver, [i])
        elif kind == "to_whom":
            matches = [g for g in gives if g[0] == giver and g[1] == o]
            if len(matches) == 1:
                return Story("qa5", facts, f"Who did {giver} give the {o} to?", receiver, [i])
        else:
            matches = [g for g in gives if g[0] == giver and g[2] == receiver]
            if len(matches) == 1:
                return Story("qa5", facts, f"What did {giver} give to {receiver}?", o, [i])


_MAKERS: Dict[str, Callable[[random.Random], Story]] = {"qa1": _qa1, "qa2": _qa2, "qa3": _qa3, "qa4": _qa4, "qa5": _qa5}


def make_story(qa: str, rng: random.Random) -> Story:
    """One random bAbI-style story for task ``qa`` (``"qa1"`` .. ``"qa5"``), answer correct by construction."""
    _check_qa(qa)
    return _MAKERS[qa](rng)


# ----------------------------------------------------------------------------------------- tokens and text


def load_token_counter(tokenizer: str) -> Callable[[str], int]:
    """``text -> number of tokens`` for a SentencePiece ``.model`` file, a folder holding ``tokenizer.model``,
    or a Hugging Face tokenizer name/folder (special tokens not counted)."""
    p = Path(tokenizer).expanduser()
    sp_file = p if p.is_file() and p.suffix == ".model" else p / "tokenizer.model"
    if sp_file.is_file():
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(sp_file))
        return lambda text: len(sp.encode(text))
    if p.is_file():
        raise ValueError(f"tokenizer={tokenizer!r} is a file but not a SentencePiece '.model' file")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def iter_haystack_lines(haystack: str = "stdlib") -> Iterator[str]:
    """Non-empty, stripped lines of a corpus, forever (the corpus is cycled).

    ``haystack``: ``"stdlib"`` (the Python standard library's source), ``"pg19"`` (Hugging Face
    ``deepmind/pg19`` test split, streamed; needs the hub or its cache), or a path to a text file or a folder
    of ``.txt`` files.
    """

    def docs() -> Iterable[str]:
        if haystack == "stdlib":
            from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

            return iter_stdlib_documents(include_tests=False)
        if haystack == "pg19":
            import datasets

            ds = datasets.load_dataset("deepmind/pg19", split="test", streaming=True)
            return (row["text"] for row in ds)
        p = Path(haystack).expanduser()
        if p.is_file():
            return [p.read_text(encoding="utf-8", errors="replace")]
        if p.is_dir():
            files = sorted(p.rglob("*.txt"))
            if not files:
                raise FileNotFoundError(f"haystack={haystack!r}: the folder holds no .txt files")
            return (f.read_text(encoding="utf-8", errors="replace") for f in files)
        raise FileNotFoundError(f"haystack={haystack!r} is neither 'stdlib', 'pg19', a text file nor a folder")

    while True:
        n = 0
        for doc in docs():
            for line in doc.splitlines():
                line = line.strip()
                if line:
                    n += 1
                    yield line
        if n == 0:
            raise ValueError(f"haystack={haystack!r} has no non-empty lines")


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


def build_sample(
    story: Story,
    length: str,
    lines: Iterator[str],
    count_tokens: Callable[[str], int],
    rng: random.Random,
    depth: Optional[int] = None,
) -> Dict:
    """One BABILong-format row: ``story`` hidden in haystack ``lines`` to ``length`` tokens (see module doc).

    Raises ``ValueError`` when the facts alone are longer than the requested length, or for a depth outside
    0..100 or with ``"0k"`` (no haystack).
    """
    target = parse_length(length)
    if depth is not None and not (isinstance(depth, int) and 0 <= depth <= 100):
        raise ValueError(f"depth={depth!r}; accepted: an integer percentage 0..100 (e.g. {list(DEPTHS)})")
    block = " ".join(story.facts)
    if target == 0:
        if depth is not None:
            raise ValueError("depth is set but length='0k' has no haystack to place the facts in; use depth=None")
        segments, fact_seg = [block], [0]
    else:
        story_tokens = count_tokens(block)
        if story_tokens + LENGTH_TOLERANCE_TOKENS >= target:
            raise ValueError(
                f"length={length!r} ({target} tokens) is too short for this {story.qa} story of {story_tokens} tokens; "
                f"use a longer length (accepted: {[k for k, v in LENGTHS.items() if v > story_tokens]})"
            )
        # Haystack lines are drawn once into ``pool`` and reused while the budget is corrected: joining
        # lines changes the token count a little (word pieces at the joins), so the whole text is measured
        # and the haystack budget shifted by the error until the input is within 2 tokens of the target.
        pool: List[Tuple[str, int]] = []
        fracs = sorted(rng.random() for _ in story.facts)

        def line(i: int) -> Tuple[str, int]:
            while len(pool) <= i:
                ln = next(lines)
                pool.append((ln, count_tokens(ln)))
            return pool[i]

        def assemble(budget: int):
            hay, hay_tok, used, i = [], [], 0, 0
            while used < budget:
                ln, n = line(i)
                i += 1
                if used + n > budget:
                    words = ln.split()
                    lo, hi = 0, len(words)
                    while lo < hi:  # longest word prefix that fits
                        mid = (lo + hi + 1) // 2
                        if count_tokens(" ".join(words[:mid])) <= budget - used:
                            lo = mid
                        else:
                            hi = mid - 1
                    if lo:
                        hay.append(" ".join(words[:lo]))
                        hay_tok.append(count_tokens(hay[-1]))
                    break
                hay.append(ln)
                hay_tok.append(n)
                used += n
            if depth is None:
                cuts = [round(f * len(hay)) for f in fracs]
                segs, fseg, k = [], [], 0
                for j, fact in enumerate(story.facts):
                    segs.extend(hay[k : cuts[j]])
                    k = cuts[j]
                    fseg.append(len(segs))
                    segs.append(fact)
                segs.extend(hay[k:])
                return segs, fseg
            # Split the haystack where depth% of its tokens lie before the split (inside a line: at the word
            # boundary closest to that token count), and put the story block there.
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

        budget = target - story_tokens
        best = None
        for _ in range(12):
            segments, fact_seg = assemble(budget)
            err = count_tokens("\n".join(segments)) - target
            if best is None or abs(err) < abs(best[0]):
                best = (err, segments, fact_seg)
            if abs(err) <= 2:
                break
            # Halve the correction once the error changes sign (a whole line entering or leaving).
            budget -= err if best[0] == err else max(1, abs(err) // 2) * (1 if err > 0 else -1)
        _, segments, fact_seg = best
    text = "\n".join(segments)
    # Character offsets of each fact (scattered) or of the block (depth / 0k) in ``text``.
    offsets, pos = [], 0
    starts = []
    for s in segments:
        starts.append(pos)
        pos += len(s) + 1
    if len(fact_seg) == len(story.facts):
        offsets = [starts[j] for j in fact_seg]
    else:
        offsets = [starts[fact_seg[0]]]
        for f in story.facts[:-1]:
            offsets.append(offsets[-1] + len(f) + 1)
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
    if depth is not None:
        hay_total = row["n_tokens"] - count_tokens(block)
        before = count_tokens(text[: offsets[0]]) if offsets[0] else 0
        row["depth_measured"] = before / hay_total if hay_total else 0.0
    return row


def generate(
    out_dir,
    qa_tasks: Sequence[str] = QA_TASKS,
    lengths: Sequence[str] = ("0k", "1k", "2k", "4k"),
    n: int = 50,
    depths: Optional[Sequence[int]] = None,
    tokenizer: Optional[str] = None,
    haystack: str = "stdlib",
    seed: int = 0,
    progress: bool = False,
) -> List[Path]:
    """Write ``<out_dir>/<length>/<qa>.jsonl`` files; ``n`` rows per (length, qa[, depth]). Returns the paths.

    ``depths`` (e.g. ``[0, 25, 50, 75, 100]``) makes the fact-depth variant (``"0k"`` is then skipped: it
    has no haystack); without it facts are scattered at random as in BABILong. ``tokenizer`` is required
    for any length other than ``"0k"``: lengths are counted in its tokens. ``progress``: a tqdm bar over the rows
    (total and ETA; long lengths take a while to fit).
    """
    for qa in qa_tasks:
        _check_qa(qa)
    for length in lengths:
        parse_length(length)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}; accepted: an integer >= 1 (rows per length, task and depth)")
    if any(LENGTHS[l] for l in lengths) and tokenizer is None:
        raise ValueError("tokenizer is required for lengths other than '0k' (lengths are counted in its tokens)")
    count_tokens = load_token_counter(tokenizer) if tokenizer else (lambda t: len(t.split()))
    rng = random.Random(seed)
    lines = iter_haystack_lines(haystack)
    out = Path(out_dir)
    paths = []
    todo = [l for l in lengths if not (depths is not None and LENGTHS[l] == 0)]
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo) * len(qa_tasks) * len(depths or [None]) * n, desc="babilong rows", unit="row",
               disable=not progress)
    for length in todo:
        plan: List[Optional[int]] = [None] if depths is None else list(depths)
        (out / length).mkdir(parents=True, exist_ok=True)
        for qa in qa_tasks:
            bar.set_postfix_str(f"{length} {qa}", refresh=False)
            path = out / length / f"{qa}.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for depth in plan:
                    for _ in range(n):
                        row = build_sample(make_story(qa, rng), length, lines, count_tokens, rng, depth)
                        f.write(json.dumps(row, ensure_ascii=False) + "\n")
                        bar.update(1)
            paths.append(path)
    bar.close()
    return paths


def main(argv: Optional[Sequence[str]] = None) -> None:
    """CLI: ``python -m torchtune_longshort.eval.babilong_generator --out DIR --tokenizer TOK [...]``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (<out>/<length>/<qa>.jsonl)")
    ap.add_argument("--tokenizer", help="SentencePiece .model, folder with tokenizer.model, or HF tokenizer")
    ap.add_argument("--qa", default=",".join(QA_TASKS), help="comma list of qa1..qa5")
    ap.add_argument("--lengths", default="0k,1k,2k,4k", help=f"comma list of {list(LENGTHS)}")
    ap.add_argument("--depths", default=None, help="comma list of fact depths in %% (e.g. 0,25,50,75,100)")
    ap.add_argument("--n", type=int, default=50, help="rows per length, task and depth")
    ap.add_argument("--haystack", default="stdlib", help="stdlib | pg19 | path to .txt file or folder")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        depths = None if a.depths is None else [int(d) for d in a.depths.split(",")]
    except ValueError:
        ap.error(f"--depths={a.depths!r}: expected comma-separated integers 0..100")
    paths = generate(a.out, a.qa.split(","), a.lengths.split(","), a.n, depths, a.tokenizer, a.haystack, a.seed,
                     progress=True)
    for p in paths:
        print(p)


if __name__ == "__main__":
    main()
