"""lm-eval's response cache (``--use_cache``) and the ``longshort`` model's refusals.

lm-eval's ``CachingLM`` stores every result it gets, a refusal too (a request past ``max_length``, one that did not
fit the device: scored NaN with its reason). The rerun the refusal asks for (a larger ``max_length``, a larger
device) then replayed the stored NaN and its old reason. The model drops refusals from the cache it is handed, so
they are asked again.

lm-eval keys the cache on the request alone, not the model or its arguments: a second checkpoint, RoPE setting or
dtype given the same ``--use_cache`` path was answered with the first one's numbers. The model signs the cache it
is handed with what its answers depend on (:func:`cache_identity`) and refuses one signed by another model, or
holding answers nobody signed (lm-eval's own models do not sign), in one line (:func:`claim_cache`).
``longshort-eval`` runs the same comparison on the cache files before lm-eval starts (:func:`check_cache_files`),
and refuses another model (``hf``) a cache a ``longshort`` model signed."""

from __future__ import annotations

import glob
import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, MutableMapping, Optional, Tuple

import sqlitedict
from lm_eval.api.model import hash_args

from torchtune_longshort.data.file_paths import file_digests
from torchtune_longshort.eval.tasks.common.unavailable import refusal_of
from torchtune_longshort.plural import counted

logger = logging.getLogger(__name__)

# the cache's entry naming the model whose answers it holds; never a request's key (a sha256 hex digest)
OWNER_KEY = "longshort-eval: model"
CACHE_TABLE = "unnamed"  # the table of lm-eval's SqliteDict(path, autocommit=True): SqliteDict's default tablename


def cache_identity(args: Any, checkpoint_fingerprint: str) -> Dict[str, Any]:
    """What a ``longshort`` model's answers depend on, from its parsed ``--model_args`` (``ModelArgs``): the
    checkpoint's content, the tokenizer file's content, the RoPE override, the lengths and dtype it runs at, how it
    cuts and encodes, its generation budget. The device and batch size are left out (the same numbers)."""
    return {"checkpoint_fingerprint": checkpoint_fingerprint,
            "tokenizer": f"{args.tokenizer.format}:{file_digests([args.tokenizer.path]).hex()}",
            "rope": args.rope_spec, "max_length": args.max_length, "allow_extrapolation": args.allow_extrapolation,
            "dtype": str(args.dtype), "truncation": args.truncation, "max_gen_toks": args.max_gen_toks,
            "add_bos_token": args.add_bos_token}


def claim_cache(cache: MutableMapping[str, Any], identity: Dict[str, Any]) -> None:
    """Sign ``cache`` (lm-eval's ``SqliteDict`` of responses) with ``identity``, or raise ``ValueError`` (one line)
    when it holds answers of another model (:func:`owner_refusal`): lm-eval would hand them back as this model's."""
    why = owner_refusal(cache, identity)
    if why:
        raise ValueError(why)
    if cache.get(OWNER_KEY) is None:
        cache[OWNER_KEY] = identity
        commit = getattr(cache, "commit", None)
        if commit is not None:
            commit()


def owner_refusal(cache: Mapping[str, Any], identity: Optional[Dict[str, Any]], model: str = "longshort"
                  ) -> Optional[str]:
    """Why ``cache`` may not be handed to the model whose answers depend on ``identity`` (:func:`cache_identity`),
    or, with ``identity`` None, to lm-eval's ``model`` (which signs nothing), in one line; None when it may. A
    ``longshort`` model is refused a cache signed by another one or holding unsigned answers; any other model one
    signed by a ``longshort`` model."""
    where = getattr(cache, "filename", "the cache")
    return _refusal(_decoded_owner(lambda: cache.get(OWNER_KEY), where), len(cache), where, identity, model)


def _decoded_owner(read: Callable[[], Any], where: str) -> Any:
    """``read()``, the owner signed in the cache at ``where``; one whose value does not unpickle (garbage, or written
    by another program under the same key) raised as ``ValueError`` in one line naming the file: whose answers it
    holds is unknown, and the file is the user's (moved aside, never deleted here)."""
    try:
        return read()
    except sqlite3.Error:  # the file, not its value (a lock): the caller's to say
        raise
    except Exception as e:  # pickle's loads raises whatever the bytes lead it to (UnpicklingError, EOFError, ...)
        raise ValueError(f"--use_cache: {where}: its entry {OWNER_KEY!r} does not decode ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'no detail'}), so whose answers it holds is "
                         f"unknown: move the file aside, or give this run another --use_cache path") from None


def _refusal(owner: Any, size: int, where: str, identity: Optional[Dict[str, Any]], model: str) -> Optional[str]:
    """:func:`owner_refusal` of a cache at ``where`` signed ``owner`` (None: unsigned) holding ``size`` entries."""
    whose = "this model" if identity is not None else f"--model {model}"
    fix = (f"lm-eval keys its cache on the request alone, so they would be replayed as {whose}'s: give {whose} "
           f"its own --use_cache path (or delete {where})")
    if identity is None:
        return None if owner is None else f"--use_cache: {where} holds the answers of a longshort model; {fix}"
    if owner is None and size:
        return (f"--use_cache: {where} holds {counted(size, 'answer')} of an unnamed model (lm-eval's own "
                f"models do not sign their cache, nor did longshort-eval before); {fix}")
    if owner is not None and owner != identity:
        return f"--use_cache: {where} holds the answers of another model ({_differences(owner, identity)}); {fix}"
    return None


def _differences(owner: Any, identity: Dict[str, Any]) -> str:
    """What differs between the signature ``owner`` found in a cache and ``identity``, field by field; a field only
    one of them holds (a cache signed by a longshort-eval that signed other fields) is said to be unrecorded."""
    if not isinstance(owner, Mapping):
        return f"signed {owner!r:.60}, no longshort-eval signature"

    def said(where: Mapping[str, Any], key: str) -> str:
        return repr(where[key]) if key in where else "not recorded"

    keys = [*identity, *(k for k in owner if k not in identity)]
    return "; ".join(f"{k} {said(owner, k)} there, {said(identity, k)} here" for k in keys
                     if k not in owner or k not in identity or owner[k] != identity[k])


def check_cache_files(use_cache: str, identity: Optional[Dict[str, Any]], model: str,
                      busy_timeout: float = 5.0) -> None:
    """Before lm-eval starts (and before the model loads): raise ``ValueError`` with :func:`owner_refusal`'s line
    for each response cache ``--use_cache <use_cache>`` would hand the run that exists already. lm-eval's evaluator
    opens ``<use_cache>_rank<N>.db``, ``N`` the process's rank: each is checked, opened read-only (nothing is
    created or signed). A file or folder by that name that is no sqlite database is refused naming it (lm-eval
    ended in sqlite's traceback, 'file is not a database'); one another process holds locked past
    ``busy_timeout`` seconds (a run given the same path, writing it) is refused: it was taken for no cache, and
    its owner never compared. Under ``torchrun`` / ``accelerate launch`` every process runs this check as it starts,
    before its model loads, but nothing makes the others wait for it (torch's process group forms without a
    barrier): a faster rank's model may be signing or storing in its own file already. Those writes (lm-eval's
    autocommit, one per answer) hold the lock for milliseconds, so the check waits for them and reads the file."""
    for path in sorted(glob.glob(glob.escape(use_cache) + "_rank*.db")):
        if not path[len(use_cache) + len("_rank"):-len(".db")].isdigit():
            continue
        try:
            if Path(path).is_dir():
                raise sqlite3.DatabaseError("a folder")
            signed = _read_signature(path, busy_timeout)
            if signed is None:
                continue
            why = _refusal(*signed, path, identity, model)
        except sqlite3.OperationalError as e:
            if getattr(e, "sqlite_errorname", "") != "SQLITE_BUSY":
                continue  # not a cache lm-eval would read: its own error
            why = (f"--use_cache: {path} is in use by another process (a run given the same --use_cache path holds "
                   f"it locked); wait for that run to end, or give this run its own --use_cache path")
        except sqlite3.DatabaseError as e:  # a file of the user's by that name: lm-eval's traceback, in sqlite's words
            why = (f"--use_cache: {path} is no response cache ({e}), and lm-eval opens that name for this run; move it "
                   "aside, or give this run another --use_cache path")
        except (OSError, RuntimeError, sqlite3.Error):  # not a cache lm-eval would read: its own error
            continue
        if why:
            raise ValueError(why)


def _read_signature(path: str, busy_timeout: float) -> Optional[Tuple[Any, int]]:
    """The owner (None: unsigned) and the number of entries of the response cache at ``path``, read through one
    sqlite connection that waits ``busy_timeout`` seconds for a lock; None when it holds no table lm-eval's
    ``SqliteDict`` reads. Not through ``SqliteDict(path, flag="r")``: its thread opens a second connection with its
    own 5 s wait and sets the journal mode, and when another process took the lock between the two, that thread
    printed its traceback on stderr before the one-line refusal."""
    with closing(sqlite3.connect(path, timeout=busy_timeout)) as conn:
        if (CACHE_TABLE,) not in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            return None
        size = conn.execute(f'SELECT COUNT(*) FROM "{CACHE_TABLE}"').fetchone()[0]
        row = conn.execute(f'SELECT value FROM "{CACHE_TABLE}" WHERE key = ?', (OWNER_KEY,)).fetchone()
    return (None if row is None else _decoded_owner(lambda: sqlitedict.decode(row[0]), path)), size


def drop_refusals(cache: MutableMapping[str, Any]) -> int:
    """Remove the refused results from ``cache`` (lm-eval's ``SqliteDict`` of responses); returns how many."""
    refused = [key for key, value in cache.items() if key != OWNER_KEY and refusal_of(value)]
    for key in refused:
        del cache[key]
    if refused:
        commit = getattr(cache, "commit", None)
        if commit is not None:
            commit()
        logger.info("--use_cache: %s of an earlier run dropped from the cache, to be asked again",
                    counted(len(refused), "refused request"))
    return len(refused)


def answered_through_cache(cache_hook: Any, kind: str, requests: Iterable[Any],
                           answer: Callable[[Any], Any]) -> List[Any]:
    """``answer(request)`` for each request, read from and stored in lm-eval's response cache (``--use_cache``) as
    each is computed: lm-eval's ``CachingLM`` caches only its own three request types and passes another (``kind``,
    the misalignment task's ``next_token_divergence``) through, so a rerun computed every answer again."""
    out: List[Any] = []
    cache = getattr(cache_hook, "dbdict", None)  # lm-eval's SqliteDict under --use_cache, else None
    for req in requests:
        key = hash_args(kind, req.args) if cache is not None else None
        if key is not None and key in cache:
            out.append(cache[key])
            continue
        out.append(answer(req))
        cache_hook.add_partial(kind, req.args, out[-1])
    if cache is not None:
        cache.commit()
    return out
