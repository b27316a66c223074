"""lm-eval's response cache (``--use_cache``) and the ``longshort`` model's refusals.

lm-eval's ``CachingLM`` stores every result it gets, a refusal too (a request past ``max_length``, one that did not
fit the device: scored NaN with its reason). The rerun the refusal asks for (a larger ``max_length``, a larger
device) then replayed the stored NaN and its old reason. The model drops refusals from the cache it is handed, so
they are asked again.

lm-eval keys the cache on the request alone, not the model or its arguments: a second checkpoint, RoPE setting or
dtype given the same ``--use_cache`` path was answered with the first one's numbers. The model signs the cache it
is handed with what its answers depend on (:func:`cache_identity`) and refuses one signed by another model, or
holding answers nobody signed (lm-eval's own models do not sign), in one line (:func:`claim_cache`)."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterable, List, MutableMapping

from lm_eval.api.model import hash_args

from torchtune_longshort.data.file_paths import file_digests
from torchtune_longshort.eval.tasks.common.unavailable import refusal_of
from torchtune_longshort.plural import counted

logger = logging.getLogger(__name__)

# the cache's entry naming the model whose answers it holds; never a request's key (a sha256 hex digest)
OWNER_KEY = "longshort-eval: model"


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
    when it holds answers of another model: lm-eval would hand them back as this model's."""
    owner = cache.get(OWNER_KEY)
    where = getattr(cache, "filename", "the cache")
    fix = (f"lm-eval keys its cache on the request alone, so they would be replayed as this model's: give this model "
           f"its own --use_cache path (or delete {where})")
    if owner is None and len(cache):
        raise ValueError(f"--use_cache: {where} holds {counted(len(cache), 'answer')} of an unnamed model "
                         f"(lm-eval's own models do not sign their cache, nor did longshort-eval before); {fix}")
    if owner is not None and owner != identity:
        diff = "; ".join(f"{k} {owner.get(k)!r} there, {v!r} here" for k, v in identity.items() if owner.get(k) != v)
        raise ValueError(f"--use_cache: {where} holds the answers of another model ({diff}); {fix}")
    if owner is None:
        cache[OWNER_KEY] = identity
        commit = getattr(cache, "commit", None)
        if commit is not None:
            commit()


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
