"""The ``longshort`` model's answer to one ``next_token_divergence`` request (the ``longshort_misalignment`` task,
paper Eq. 4): the model run on two suffixes of a text, their full next-token distributions compared."""

from __future__ import annotations

from functools import partial
from typing import Any, Dict, List

import torch

from torchtune_longshort.eval.model.limits import RequestTooLong
from torchtune_longshort.eval.model.memory import run_fitting
from torchtune_longshort.eval.tasks.common.unavailable import RefusedScores
from torchtune_longshort.hidden_states import last_position_logits
from torchtune_longshort.loss.divergences import DIVERGENCES
from torchtune_longshort.metrics.misalignment import suffix_misalignment


def divergence(lm: Any, req: Any) -> Dict[str, float]:
    """``req.args`` = ``(text, {"l1": int, "l2": int, "divergences": [...]})``: the divergences between the
    next-token distributions of ``lm`` (a ``LongShortLM``) after the last ``l1`` and the last ``l2`` tokens of
    ``text`` (encoded without BOS; :func:`~torchtune_longshort.metrics.suffix_misalignment`). A text shorter than
    ``max(l1, l2)`` tokens, longer than the model runs, or out of device memory: NaN values with the reason."""
    text, params = req.args
    l1, l2 = int(params["l1"]), int(params["l2"])
    divs = tuple(params.get("divergences", DIVERGENCES))
    ids = lm.tokenizer.encode_plain(text)
    need = max(l1, l2)
    task = getattr(req, "task_name", None)
    if len(ids) < need:
        reason = lm.limits.refuse(
            task, f"a text of {len(ids)} tokens is shorter than the suffix length {need}: scored NaN", "short text"
        )
        return RefusedScores(divs, reason)
    try:
        lm.limits.check_length(need, "next_token_divergence")
    except RequestTooLong as err:
        return RefusedScores(divs, lm.limits.refuse(task, err))
    tokens = torch.tensor(ids[-need:], dtype=torch.long, device=lm.device)
    last_logits = partial(last_position_logits, lm.model)
    scores: List[Dict[str, float]] = []
    run_fitting([tokens], lambda one: scores.append(suffix_misalignment(last_logits, one[0], l1, l2,
                                                                        divergences=divs)),
                lambda _, error: scores.append(RefusedScores(divs, lm._out_of_memory(task, need, error))),
                lm.device)
    return scores[0]
