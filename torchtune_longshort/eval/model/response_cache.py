"""lm-eval's response cache (``--use_cache``) and the ``longshort`` model's refusals.

lm-eval's ``CachingLM`` stores every result it gets, a refusal too (a request past ``max_length``, one that did not
fit the device: scored NaN with its reason). The rerun the refusal asks for (a larger ``max_length``, a larger
device) then replayed the stored NaN and its old reason. The model drops refusals from the cache it is handed, so
they are asked again. (lm-eval keys the cache on the request alone, not the model or its arguments: a cache is for
reruns of one model.)"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, List, MutableMapping

from lm_eval.api.model import hash_args

from torchtune_longshort.eval.tasks.common.unavailable import refusal_of
from torchtune_longshort.plural import counted

logger = logging.getLogger(__name__)


def drop_refusals(cache: MutableMapping[str, Any]) -> int:
    """Remove the refused results from ``cache`` (lm-eval's ``SqliteDict`` of responses); returns how many."""
    refused = [key for key, value in cache.items() if refusal_of(value)]
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
