"""A generator of BABILong-style samples: bAbI QA1-QA5 stories hidden in a haystack of any text corpus.

BABILong (Kuratov et al., 2024) hides the facts of a bAbI task in long unrelated text and asks the bAbI
question. This module builds such samples offline and adds a *fact-depth* variant; it writes the data set
and is the command line (``python -m torchtune_longshort.eval.tasks.babilong.generator``). Its two halves:

* :mod:`~torchtune_longshort.eval.tasks.babilong.stories`: a story simulator for QA1-QA5 whose answers are correct
  by construction;
* :mod:`~torchtune_longshort.eval.tasks.babilong.haystack`: the haystack (the standard library's source by default,
  PG19, or local text), lengths in tokens of a given tokenizer, and where the facts go (scattered or at a depth).

Rows are written in BABILong's own format (``input``, ``question``, ``target``) plus fields of ours
(``qa``, ``length``, ``depth``, ...), one file per length and task: ``<out>/<length>/<qa>.jsonl``, the
layout the ``longshort_babilong`` tasks read (``--metadata '{"babilong_data_dir": "<out>"}'``).

What a length label sizes (``--fit``): ``input`` (the default, BABILong's own way: the haystack and facts are the
label's tokens, and the task's prompt, question and answer come on top) or ``prompt``: the whole request the pack's
task makes of a row (a BOS, lm-eval's prompt with its two examples, the input, the question, and the task's
generation budget; :mod:`~torchtune_longshort.eval.tasks.babilong.prompt`) is at most the label's tokens, so a
``"32k"`` row runs on a model of ``max_length=32768``. The study generates with ``prompt``. ``--prompt babilong`` sizes
the request of BABILong's own, longer prompt instead (the task's ``--metadata '{"babilong_prompt": "babilong"}'``:
its instruction, examples and post-prompt, and 20 tokens generated); a model's chat template is not counted.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import os
import random
import sys
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

from torchtune_longshort.refusals import ArgumentParser, refusing, stoppable, stopped_while_importing, user_path

PROG = "python -m torchtune_longshort.eval.tasks.babilong.generator"

with stopped_while_importing(__name__, PROG):  # Ctrl-C while torch is imported (seconds): one line, exit 130
    from torchtune_longshort._quiet import quiet_upstream
    from torchtune_longshort.config.inside_input import (glob_folders, refuse_glob_reads, refuse_inside_input,
                                                         refuse_inside_model, tokenizer_input)
    from torchtune_longshort.config.values import check_creatable
    from torchtune_longshort.file_locks import flock_named
    from torchtune_longshort.made_folders import missing_root, remove_made_folders
    from torchtune_longshort.eval.tasks.babilong.haystack import (
        DEPTHS,
        GLOB_EXAMPLE,
        HAYSTACK_FORMS,
        LENGTHS,
        build_sample,
        haystack_files,
        iter_haystack_lines,
        load_token_counter,
        parse_length,
        short_local_haystack,
    )
    from torchtune_longshort.eval.tasks.babilong.official_prompts import PROMPT_KEY, PROMPT_STYLES, check_prompt_style
    from torchtune_longshort.eval.tasks.babilong.partials import partial_of, remove_killed_partials
    from torchtune_longshort.eval.tasks.babilong.stories import QA_TASKS, check_qa, make_story
    from torchtune_longshort.output_guard import (atomic_open, check_output_folder, is_written_file, read_names,
                                                  start_names, write_names)
    from torchtune_longshort.rope.checkpoint_code import checkpoint_code

# What a length label sizes: the row's input, or the whole request the task makes of it (see the module doc).
FITS = ("input", "prompt")
# The list, in the output folder, of the files the generator wrote there: a rerun replaces those, and refuses to
# overwrite a file of another origin.
WRITTEN = ".longshort_babilong.json"
# A haystack repeated this many times (or more) in the longest sample is warned about.
REPEATS_WARNED = 2


def prompt_without_fit(fit: str, prompt: str, cli: bool = False) -> Optional[str]:
    """The refusal of a ``prompt`` other than lm-eval's without ``fit="prompt"``, where it would size nothing (the
    label sizes the input alone), named as :func:`generate`'s arguments or (``cli``) as the command's flags; None
    where the two go together."""
    if prompt == PROMPT_STYLES[0] or fit == "prompt":
        return None
    if cli:
        return (f"--prompt {prompt} sizes the task's request, and --fit {fit} sizes the input alone: give --fit "
                "prompt with it")
    return (f"prompt={prompt!r} sizes the task's request, and fit={fit!r} sizes the input alone; give fit='prompt' "
            "with it")


def depth_not_scored(depths: Optional[Sequence[int]], cli: bool = False) -> Optional[str]:
    """The refusal of a depth the ``longshort_babilong`` tasks do not score (they read and report only
    :data:`~torchtune_longshort.eval.tasks.babilong.haystack.DEPTHS`: a row at 10 % is refused as data), named as
    :func:`generate`'s ``depths`` or (``cli``) as ``--depths``; None where every depth is one of them."""
    bad = [d for d in depths or () if isinstance(d, bool) or not isinstance(d, int) or d not in DEPTHS]
    if not bad:
        return None
    given = f"--depths {','.join(map(str, depths))}" if cli else f"depths={list(depths)}"
    return (f"{given}: {bad[0]!r} is not a depth the longshort_babilong tasks score; accepted: "
            f"{', '.join(map(str, DEPTHS))} (% of the haystack before the facts; acc_d<depth>)")


def zero_k_with_depths(lengths: Sequence[str], depths: Optional[Sequence[int]], cli: bool = False) -> Optional[str]:
    """The refusal of ``"0k"`` among ``lengths`` with ``depths`` given: 0k has no haystack to put the facts at a
    depth in (BABILong's 0k is the facts alone), so no row of it can be a fact-depth row; named as :func:`generate`'s
    arguments or (``cli``) as the command's flags; None where there is no 0k or no depths."""
    if depths is None or not any(LENGTHS.get(l) == 0 for l in lengths):
        return None
    if cli:
        return (f"--lengths {','.join(lengths)} with --depths {','.join(map(str, depths))}: 0k has no haystack to "
                "put the facts at a depth in (it is the facts alone); drop 0k from --lengths, or generate it in a "
                "run of its own without --depths")
    return (f"lengths={list(lengths)} with depths={list(depths)}: '0k' has no haystack to put the facts at a depth "
            "in (it is the facts alone); leave '0k' out of lengths, or generate it without depths")


# The seed of a generation that names none (the study's, which passes no --seed; its pre-flight draws from it too).
DEFAULT_SEED = 0


def generate(
    out_dir,
    qa_tasks: Sequence[str] = QA_TASKS,
    lengths: Sequence[str] = ("0k", "1k", "2k", "4k"),
    n: int = 50,
    depths: Optional[Sequence[int]] = None,
    tokenizer: Optional[str] = None,
    haystack: str = "stdlib",
    seed: int = DEFAULT_SEED,
    progress: bool = False,
    fit: str = "input",
    prompt: str = PROMPT_STYLES[0],
) -> List[Path]:
    """Write ``<out_dir>/<length>/<qa>.jsonl`` files; ``n`` rows per (length, qa[, depth]). Returns the paths.

    ``depths`` (e.g. ``[0, 25, 50, 75, 100]``) makes the fact-depth variant (``"0k"`` is then refused: it has no
    haystack, as BABILong's own 0k; generate it without depths); without it facts are scattered at random as in
    BABILong. ``tokenizer`` is required for any length other than ``"0k"``: lengths are counted in its tokens (give
    the evaluated model's). ``fit``: what a label sizes, ``"input"`` or ``"prompt"`` (module doc). ``progress``: a
    tqdm bar over the rows (total and ETA; long lengths take a while to fit). ``prompt``: with ``fit="prompt"``, the
    task's prompt the request is sized with (its ``babilong_prompt``: ``"lm_eval"`` or ``"babilong"``). The rows of
    one (qa, length[, depth]) depend on ``seed`` and those alone (:func:`stream_seed`), not on the other tasks,
    lengths and depths asked."""
    if fit not in FITS:
        raise ValueError(f"fit={fit!r}; accepted: {', '.join(FITS)}")
    try:
        check_prompt_style(prompt)
    except ValueError:
        raise ValueError(f"prompt={prompt!r}; accepted: {', '.join(PROMPT_STYLES)} (the {PROMPT_KEY} the rows "
                         "are evaluated with)") from None
    said = prompt_without_fit(fit, prompt)
    if said:
        raise ValueError(said)
    for qa in qa_tasks:
        check_qa(qa)
    for length in lengths:
        parse_length(length)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}; accepted: an integer >= 1 (rows per length, task and depth)")
    said = depth_not_scored(depths)
    if said:  # past 100: refused by the first sample, after the output folder's files were started
        raise ValueError(said)
    if any(LENGTHS[l] for l in lengths) and tokenizer is None:
        raise ValueError("tokenizer is required for lengths other than '0k' (lengths are counted in its tokens)")
    said = zero_k_with_depths(lengths, depths)
    if said:  # refused whole, as 0k alone is: a requested length is never left out of the folder
        raise ValueError(said)
    out = Path(out_dir)
    names = [f"{length}/{qa}.jsonl" for length in lengths for qa in qa_tasks]
    check_apart(out, lengths, tokenizer, haystack, names)
    listed = out / WRITTEN  # one of the user's by that name: its '.partial' files were deleted, it was written over
    if os.path.lexists(listed) and (not listed.is_file() or listed.stat().st_size and read_names(listed) is None):
        raise FileExistsError(f"--out={str(out)!r} holds {WRITTEN}, which is no JSON list of names (the files this "
                              "generator wrote there): move it away, or choose another --out")
    check_output_folder(out, "--out", names, _written)  # a file of the user's there is refused, never overwritten
    check_creatable("--out", str(out), writable=True)  # an existing folder that takes no file: a traceback
    count_tokens = load_token_counter(tokenizer, label="--tokenizer") if tokenizer else (lambda t: len(t.split()))
    lines = _Replay(iter_haystack_lines(haystack, label="--haystack"))  # named as typed, as --tokenizer is
    lines.line(0)  # a haystack that cannot be read is refused before any write
    _warn_if_repeated(haystack, max(LENGTHS[l] for l in lengths), count_tokens)
    prompts = {}
    if fit == "prompt":
        # deferred: lm_eval (the prompt is measured on lm-eval's task; --fit input needs none of it)
        from torchtune_longshort.eval.tasks.babilong.prompt import task_prompt

        prompts = {qa: task_prompt(qa, prompt) for qa in qa_tasks}
    remove_killed_partials(out, list(LENGTHS), QA_TASKS, out / WRITTEN)  # once nothing is left to refuse
    paths = []
    from tqdm.auto import tqdm

    bar = tqdm(total=len(lengths) * len(qa_tasks) * len(depths or [None]) * n, desc="babilong rows", unit="row",
               disable=not progress)
    with contextlib.closing(bar), _taken_back(out, lengths):  # the bar closed before a failure's line
        # the list made before the first partial file: what marks a killed run's partial files as the generator's
        start_names(out / WRITTEN)
        for length in lengths:
            _write_length(out, length, qa_tasks, depths, n, lines, count_tokens, seed, prompts, bar, paths)
    return paths


@contextlib.contextmanager
def _taken_back(out: Path, lengths: Sequence[str]) -> Iterator[None]:
    """The block that writes the rows; when it fails (a full disk, Ctrl-C) what this run made and left empty is taken
    back: the length folders, ``out`` and the parents it made (:func:`remove_made_folders`), and the :data:`WRITTEN`
    list when this run created it and no name is left on it. A folder or list that was there before stays."""
    made_root, had_list = missing_root(out), os.path.lexists(out / WRITTEN)
    new = [Path(os.path.abspath(out / n)) for n in dict.fromkeys(lengths) if not os.path.lexists(out / n)]
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            if not had_list and os.path.isfile(out / WRITTEN):
                fd, _ = flock_named(out / WRITTEN, os.O_RDONLY)  # another run writing there may have listed a name
                try:
                    if not read_names(out / WRITTEN):  # [] or the empty file the flock made
                        os.unlink(out / WRITTEN)
                finally:
                    os.close(fd)
            for folder in new:
                remove_made_folders(folder, folder)  # only when empty
            remove_made_folders(out, made_root)
        raise


def stream_seed(seed: int, qa: str, length: str, depth: Optional[int]) -> str:
    """The seed of the random stream of one (qa, length[, depth]) row set: its rows depend on these alone, never on
    what else one run asked (a length added to a sweep leaves the others' rows as they were)."""
    return f"{seed}-{qa}-{length}" if depth is None else f"{seed}-{qa}-{length}-d{depth}"


class _Replay:
    """A haystack read once and replayed from its first line to each row set (:func:`stream_seed`), so the text a row
    set is hidden in does not depend on how much of it the row sets before it used."""

    def __init__(self, lines: Iterator[str]):
        self._lines, self._seen = lines, []

    def line(self, i: int) -> str:
        while len(self._seen) <= i:
            self._seen.append(next(self._lines))
        return self._seen[i]

    def replay(self) -> Iterator[str]:
        return (self.line(i) for i in itertools.count())


def _warn_if_repeated(haystack: str, longest: int, count_tokens) -> None:
    """One line on stderr when a local haystack is much shorter than the longest length asked: a sample then holds
    the same text again and again (it was built silently, e.g. 2 bytes repeated thousands of times)."""
    if not longest:  # 0k alone: no haystack is read
        return
    # a token holds far fewer than 32 characters: a text of 16 characters per token asked holds over half of them
    text = short_local_haystack(haystack, 16 * longest)
    tokens = max(count_tokens(text), 1) if text is not None else longest
    if longest / tokens >= REPEATS_WARNED:
        print(f"babilong generator: warning: --haystack={haystack!r} holds {tokens} tokens, much shorter than the "
              f"longest length asked ({longest} tokens): a sample repeats it about {round(longest / tokens)} times; "
              "name a longer text", file=sys.stderr)


def _write_length(out: Path, length: str, qa_tasks, depths, n: int, lines: _Replay, count_tokens, seed: int,
                  prompts, bar, paths: List[Path]) -> None:
    """The rows of one length label, one file per task, each written aside and moved into place."""
    plan: List[Optional[int]] = [None] if depths is None else list(depths)
    (out / length).mkdir(parents=True, exist_ok=True)
    for qa in qa_tasks:
        bar.set_postfix_str(f"{length} {qa}", refresh=False)
        path = out / length / f"{qa}.jsonl"
        written = None  # the file this run wrote, once whole
        try:  # written aside (an earlier file stays whole until this one is); a full disk removes the part
            with atomic_open(path, "w", tmp=partial_of(path), encoding="utf-8") as f:
                for depth in plan:
                    rng, hay = random.Random(stream_seed(seed, qa, length, depth)), lines.replay()
                    for _ in range(n):
                        row = build_sample(make_story(qa, rng), length, hay, count_tokens, rng, depth,
                                           prompts.get(qa))
                        f.write(json.dumps(row, ensure_ascii=False) + "\n")
                        bar.update(1)
                written = os.fstat(f.fileno())
        finally:  # listed once in place (a Ctrl-C just after the rename too): listed before, a run killed (SIGKILL)
            # in between left a name with no file, and the next run overwrote a file of the user's put there
            if is_written_file(path, written):
                _record(out, f"{length}/{qa}.jsonl")
        paths.append(path)


def check_apart(out: Path, lengths: Sequence[str], tokenizer: Optional[str], haystack: str,
                names: Sequence[str] = ()) -> None:
    """``ValueError`` when ``--out`` is, or lies inside, a model's folder, the ``--tokenizer`` (a file of a folder
    with a ``tokenizer_config.json`` or ``config.json``: that folder) or the local ``--haystack`` (a glob: the
    folder of each file it matches), or when a length folder it writes in is or lies inside one of those: the rows
    and :data:`WRITTEN` were written among a model's files (a later conversion into that folder refused it). A glob
    ``--haystack`` that would match a file it writes (``names``, ``<length>/<qa>.jsonl``; each length's ``*.jsonl``
    without them) is refused too: the next run read the rows as haystack. A ``--haystack`` that is no glob and names
    nothing is refused as such first (one that a run writes, ``out/0k/qa1.jsonl``, was told "would be read back")."""
    local = haystack not in ("stdlib", "pg19")
    if local and not glob.has_magic(haystack) and not Path(haystack).expanduser().exists():
        haystack_files(haystack, "--haystack")  # names nothing: said so first, not "would be read back" as a glob is
    refuse_inside_model("--out", out, "the rows")
    inputs = []
    if tokenizer and Path(tokenizer).expanduser().exists():
        inputs.append(("--tokenizer", tokenizer_input(tokenizer)))
    if local and Path(haystack).expanduser().exists():
        inputs.append(("--haystack", haystack))
    elif local:  # a glob: the folders of its matches the rows would land in
        inputs += [("the folder of --haystack's matches", str(d))
                   for d in glob_folders(haystack, [out, *(out / length for length in lengths)])]
    refuse_inside_input("--out", out, inputs, "the rows", "which this command reads",
                        writes_in=[out / length for length in lengths])
    if local and not Path(haystack).expanduser().exists():
        written = [out / n for n in (names or [f"{length}/*.jsonl" for length in lengths])]
        refuse_glob_reads("--out", out, "--haystack", haystack, [out / WRITTEN, *written], "the rows")


def _written(out: Path) -> List[str]:
    """The files earlier runs of the generator wrote in ``out`` (its :data:`WRITTEN` list)."""
    return read_names(out / WRITTEN) or []


def _record(out: Path, name: str) -> None:
    """Add ``name`` to ``out``'s :data:`WRITTEN` list, read and written under the list's flock: two generators on
    one ``--out`` each wrote the list it had read, so the first's name was lost (and its file refused to its rerun,
    as written by no earlier run)."""
    fd, _ = flock_named(out / WRITTEN, os.O_RDONLY)  # the list itself, made empty where absent (read as no names)
    try:
        have = _written(out)
        if name not in have:
            write_names(out / WRITTEN, have + [name])
    finally:
        os.close(fd)


def _comma_list(ap: ArgumentParser, flag: str, text: str, accepted) -> List[str]:
    """The names of a comma list flag, as the task reads its max_seq_lengths: spaces around a name and empty items
    left out (the study's ``qa: "qa1, qa2"`` came here as ``' qa2'`` and was refused after the training), a name given
    twice kept once (its file was written twice; a depth given twice, ``--depths``, is kept once too: it wrote 2n
    rows there); none at all, or a name not ``accepted``, is refused, naming the flag."""
    names = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not names:
        ap.error(f"{flag}={text!r}: name at least one of {', '.join(accepted)}")
    bad = [x for x in names if x not in accepted]
    if bad:  # named as typed (generate() names its qa_tasks= / lengths=)
        what = "a BABILong length" if flag == "--lengths" else "a task the generator writes"
        ap.error(f"{flag} {','.join(names)}: {bad[0]} is not {what}; accepted: {', '.join(accepted)}")
    return names


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI: ``python -m torchtune_longshort.eval.tasks.babilong.generator --out DIR --tokenizer TOK [...]``; bad input
    is refused in one line (:mod:`torchtune_longshort.refusals`) before anything is written."""
    ap = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=user_path, help="output folder (<out>/<length>/<qa>.jsonl)")
    ap.add_argument("--tokenizer", help="tokenizer folder or file of any format the project reads (tokenizer.model, "
                    "original/tokenizer.model, tokenizer.json), or a hub tokenizer name: lengths are counted in its "
                    "tokens (default: none, which only --lengths 0k takes)")
    ap.add_argument("--qa", default=",".join(QA_TASKS), help="comma list of qa1..qa5 (default %(default)s)")
    ap.add_argument("--lengths", default="0k,1k,2k,4k",
                    help=f"comma list of {', '.join(LENGTHS)} (default %(default)s)")
    ap.add_argument("--depths", default=None,
                    help=f"comma list of fact depths in %% (of {', '.join(map(str, DEPTHS))}, "
                    "the depths the tasks score; default: none, the facts scattered at random as in BABILong)")
    ap.add_argument("--n", type=int, default=50, help="rows per length, task and depth (default %(default)s)")
    ap.add_argument("--haystack", default="stdlib",
                    help=f"{HAYSTACK_FORMS}, quoted {GLOB_EXAMPLE} (default %(default)s)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED,
                    help="seed of the stories and of where the facts go; the rows of one (qa, length[, depth]) "
                    "depend on it and those alone, not on what else is asked (default %(default)s)")
    ap.add_argument("--fit", choices=FITS, default="input",
                    help="what a length label sizes: the row's input (BABILong's way), or the whole request the "
                    "task makes of it (prompt, question and generation budget included: it then fits a model of "
                    "that max_length; default %(default)s)")
    ap.add_argument("--prompt", choices=PROMPT_STYLES, default=PROMPT_STYLES[0],
                    help=f"with --fit prompt: the task's prompt the request is sized with (its {PROMPT_KEY}: "
                    "lm-eval's babilong_qa* prompt, or BABILong's own, longer one; default %(default)s)")
    ap.add_argument("--trust-remote-code", action="store_true",
                    help="import the code of one's own a --tokenizer folder's config.json names (longshort_family, "
                    "longshort_rope.method: it picks the tokenizer formats' order); without it such a folder is "
                    "refused before that module is imported")
    a = ap.parse_args(argv)
    if prompt_without_fit(a.fit, a.prompt, cli=True):  # named as typed, not as generate()'s prompt=, fit=
        ap.error(prompt_without_fit(a.fit, a.prompt, cli=True))
    quiet_upstream()
    try:
        depths = None if a.depths is None else list(dict.fromkeys(int(d) for d in a.depths.split(",")))
    except ValueError:
        ap.error(f"--depths={a.depths!r}: expected comma-separated integers 0..100")
    qa_tasks, lengths = _comma_list(ap, "--qa", a.qa, QA_TASKS), _comma_list(ap, "--lengths", a.lengths, LENGTHS)
    for said in (depth_not_scored(depths, cli=True), zero_k_with_depths(lengths, depths, cli=True)):
        if said:  # named as typed, before the tokenizer is read
            ap.error(said)
    with checkpoint_code(a.trust_remote_code, "--trust-remote-code"):  # the --tokenizer folder is someone's
        paths = stoppable(PROG, lambda: refusing(PROG, lambda: generate(
            a.out, qa_tasks, lengths, a.n, depths, a.tokenizer, a.haystack, a.seed,
            progress=True, fit=a.fit, prompt=a.prompt)), "each file written so far is whole; the same command writes "
            "them all again")
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
