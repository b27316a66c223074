"""What a resume asks of a document source before it takes a saved data position
(:meth:`~.dual_window.PackedTokenStream.load_state_dict`): the state's ``reading`` mark against the source's
``earlier_reading`` (how earlier versions read it: refused where the position would land on other documents) and
``earlier_text`` (read otherwise within the same documents: said), the document count, and the files' digests."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from torchtune_longshort.data.file_paths import DIGEST_BYTES
from torchtune_longshort.data.file_kinds import record_suffixes
from torchtune_longshort.plural import counted

# The data state's "reading" mark, raised each time a source reads the same files otherwise: 2 since 2026-12-05, when
# local_text left a folder's hidden files out and hf_text read text files whole; 3 since 2026-12-06, when hf_text
# left empty and whitespace-only records out (as local_text always did) and local_text read a text file's '\r\n' /
# '\r' line ends as '\n'; 4 since 2026-12-07, when hf_text read a folder's text files whole where other data
# files stand beside them (datasets still picks its text builder); 5 since 2026-12-07, when hf_text asked datasets for
# a folder's builder with its data_files / data_dir (text files named in a folder of mostly other data files were
# read by lines); 6 since 2026-12-07, when local_text read a *.ndjson file (a suffix datasets reads with its json
# builder) as JSON lines, not whole, and a folder's such files too; 7 since 2026-12-07, when local_text read a
# *.geoparquet / *.gpq file (a suffix datasets reads with its parquet builder) by its rows, not refused as no text, and
# a folder's such files too. A state without it (1) was saved before the mark existed.
DATA_READING = 7
log = logging.getLogger(__name__)

# a source's earlier readings: {the mark that changed it: a clause after "which", or a callable of the saved state
# giving one (None: this source and position read the same)}; a bare string is the change of mark 2
Clause = Union[str, Callable[[Dict[str, Any]], Optional[str]]]
Earlier = Union[None, str, Mapping[int, Clause]]


def earlier_clauses(earlier: Earlier, state: Dict[str, Any]) -> str:
    """The clauses of ``earlier`` that apply to a data ``state`` saved with an older ``reading`` mark, joined; ''
    when none does (a callable is asked only then, so a scan it makes is paid by such resumes alone)."""
    if not earlier:
        return ""
    reading = state.get("reading", 1)
    table = {2: earlier} if isinstance(earlier, str) else dict(earlier)
    clauses = []
    for mark in sorted(table):
        if reading < mark:
            clause = table[mark](state) if callable(table[mark]) else table[mark]
            if clause:
                clauses.append(clause)
    return "; and ".join(clauses)


def line_ends_read_otherwise(files: Sequence[Any], encoding: str) -> Optional[str]:
    """The clause for a data state saved before mark 3 over ``files`` read whole (``local_text``), where a text
    file holding a '\\r' (read as it was before, '\\n' now) is the first such file named; None where none holds one.
    Read to the first '\\r' of each text file, its record files (JSON, Parquet: their strings unchanged) not read."""
    for f in files:
        if Path(f).suffix in record_suffixes():
            continue
        try:
            with open(f, encoding=encoding, errors="replace", newline="") as text:
                while True:
                    chunk = text.read(1 << 20)
                    if not chunk:
                        break
                    if "\r" in chunk:
                        return (f"read a text file's '\\r\\n' and '\\r' line ends as they are ({f} holds them; this "
                                "version reads them as '\\n', as Python's text mode does)")
        except OSError:  # the reading itself names it
            continue
    return None


def _left_over(longer: Sequence[bytes], shorter: Sequence[bytes]) -> Optional[list]:
    """The indices of ``longer`` left when ``shorter`` is found in it in order (None: it is not)."""
    left, j = [], 0
    for i, d in enumerate(longer):
        if j < len(shorter) and d == shorter[j]:
            j += 1
        else:
            left.append(i)
    return left if j == len(shorter) else None


def edited_files(files: Sequence[Any], saved: Optional[bytes], now: Optional[bytes], position: str,
                 reach: Optional[Callable[[List[int]], Optional[str]]] = None) -> str:
    """What changed in ``files`` (a source's, in order; the count of documents the same) between the ``saved`` data
    state's digests and ``now`` (:func:`~.file_paths.file_digests`), and what the resume at ``position`` does; ''
    when either is None or they are equal. A file added or removed beside unchanged ones holds no document: said so.
    ``reach``: given the indices of the files changed, what the edit affects (:func:`_reach`; None: not known)."""
    if saved is None or now is None or saved == now:
        return ""
    n = DIGEST_BYTES
    old, new = ([d[i:i + n] for i in range(0, len(d), n)] for d in (saved, now))
    others = min(len(old), len(new))
    # two subjects ('the document count and the 1 other file'): 'are', whatever the count
    same = (f"the document count and the {counted(others, 'other file')} are the same: {position} the same "
            "document, and the run reads what it read before; nothing to do")
    if len(old) != len(new) and len(files) == len(new):
        added, gone = _left_over(new, old), _left_over(old, new)
        if added:
            named = f"{files[added[0]]}{f' (and {len(added) - 1} more)' if len(added) > 1 else ''}"
            return (f"{named}, added since the run saved its data state, hold{'s' if len(added) == 1 else ''} no "
                    f"document ({same})")
        if gone:
            return (f"{counted(len(gone), 'file')} the run read, which held no document, "
                    f"{'is' if len(gone) == 1 else 'are'} gone since the run saved its data state ({same})")
    if len(old) != len(new) or len(files) != len(new):
        edited = (f"its {len(new)} files are not the {len(old)} the run read (files added or removed, others "
                  "changed, the document count the same)")
    else:
        indices = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
        changed = [str(files[i]) for i in indices]
        more = f" (and {counted(len(changed) - 1, 'more file')})" if len(changed) > 1 else ""
        edited = f"{changed[0]}{more} changed"
        affects = reach(indices) if reach is not None else None
        if affects:
            return (f"{edited} since the run saved its data state (its size or first MiB); {affects}. To train on "
                    "it from its start, start a new run from the step's weights (checkpoint_dir=<its step folder>)")
    return (f"{edited} since the run saved its data state (its size or first MiB); {position} the edited text. To "
            "train on it from its start, start a new run from the step's weights (checkpoint_dir=<its step folder>)")


def _reach(file_of: Optional[Sequence[int]], state: Dict[str, Any], order: Optional[Sequence[int]]
           ) -> Callable[[List[int]], Optional[str]]:
    """What an edit of the files at given indices affects, for a source whose document ``d`` is in file
    ``file_of[d]``, at a data ``state`` read in ``order`` (a shuffled pass's; None: the source's order): a pass reads
    documents ``order[:docs_consumed]`` before the position, then the rest. None where ``file_of`` is not known."""
    def reach(indices: List[int]) -> Optional[str]:
        if file_of is None:
            return None
        k, epoch, edited = int(state["docs_consumed"]), int(state["epoch"]), set(indices)
        passed = [file_of[d] in edited for d in (order if order is not None else range(len(file_of)))]
        ahead = [i for i in range(k, len(passed)) if passed[i]]
        it = "it" if len(indices) == 1 else "them"
        where = f"its saved position (document {k} of pass {epoch})"
        if ahead:  # documents still to come in this pass
            before = (f" (and what pass {epoch} read of {it} before it from pass {epoch + 1} on)"
                      if any(passed[:k]) else "")
            return (f"{where} comes before {it}: the resumed run reads the edited text in this pass, from its "
                    f"document {ahead[0]} on{before}")
        return (f"{where} is past {it}: pass {epoch} read {it} before (what of {it} the saved buffer holds is the "
                f"old text), the documents still to come in pass {epoch} are unchanged, and the run reads the edited "
                f"text from pass {epoch + 1} on")
    return reach


def check_resumable(documents: Any, state: Dict[str, Any], digests: Optional[bytes],
                    order: Optional[Sequence[int]] = None) -> None:
    """Refuse (``ValueError``) a saved data ``state`` whose position would land on other documents of ``documents``
    (read otherwise by the version that saved it, or a file added or deleted since), and warn where it lands on the
    same document with other text (a file edited since: ``digests`` now, what it affects said where the source
    gives each document's file; read otherwise within a document). ``order``: this pass's order, when shuffled."""
    saved, count = state.get("documents"), getattr(documents, "count", None)
    source = f"{getattr(documents, 'where', 'dataset')} {getattr(documents, 'description', repr(documents))}"
    position = f"its saved position (document {state['docs_consumed']} of pass {state['epoch']}) would land on"
    earlier = earlier_clauses(getattr(documents, "earlier_reading", None), state) if (
        saved is None or saved != count) else ""
    if earlier:
        # the position counts documents as the saving version read them: here it lands on others (or past the end,
        # refused as if the data had changed, blaming the user's files); the same count (hidden files that held no
        # document) is the same data
        raise ValueError(
            f"cannot resume: this run was saved by an earlier torchtune_longshort, which {earlier}: {source} is "
            f"not read as the run read it, and {position} other text. Finish this run with the version that "
            "started it, or start a new run in another output_dir")
    if saved is not None and count is not None and saved != count:
        # a file added to or deleted from a corpus folder: the saved position counts documents, and would land on
        # others (the resume trained on shifted data without a word)
        raise ValueError(
            f"cannot resume: {source} holds {count} documents now, the saved run read {saved}: {position} other "
            "documents. Restore the data the run read (a file added, deleted or emptied since), or start a new "
            "run in another output_dir")
    line_ends = earlier_clauses(getattr(documents, "earlier_text", None), state)
    if line_ends:  # the same documents, each where it was: said, not refused (the text read now is the corrected one)
        log.warning(f"resume: this run was saved by an earlier torchtune_longshort, which {line_ends}: {source}: "
                    f"{position} the same document, its text differing by its line ends. To train on the text as the "
                    "run read it, finish this run with the version that started it")
    edited = edited_files(getattr(documents, "files", None) or (), state.get("digests"), digests, position,
                          _reach(getattr(documents, "file_of", None), state, order))
    if edited:  # the same count: the position lands on the same document of the edited text (as torchtune's and
        # HF Trainer's resumes go on, which never look): said, not refused, since a corrected corpus is a reason
        log.warning(f"resume: {source}: {edited}")
