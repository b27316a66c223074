"""Log-likelihood scoring for the ``longshort`` model: batches of (input, continuation) token lists scored from
final hidden states, projected to the vocabulary a bounded chunk of positions at a time
(:mod:`torchtune_longshort.hidden_states`), and the result type lm-eval receives."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from tqdm.auto import tqdm

from torchtune_longshort.eval.model.batch_size import BatchPlan, RowMemory, length_batches
from torchtune_longshort.eval.model.memory import out_of_memory_reason
from torchtune_longshort.hidden_states import decoder_of, hidden_state_output, project_target_logprobs

# (request index, input tokens = context + continuation minus the last token, continuation tokens)
Prepared = Tuple[int, List[int], List[int]]
__all__ = ["Prepared", "TokenLoglikelihood", "forward_hidden", "length_batches", "score_continuations"]


class TokenLoglikelihood(tuple):
    """``(logprob, is_greedy)`` as lm-eval expects, carrying the per-token log-probabilities as an attribute.

    lm-eval passes the object unchanged to a task's ``process_results``; ``longshort_ppl`` uses
    ``token_logprobs`` for its per-position loss curve. Other models return plain tuples. A refused request is
    ``(nan, False)`` with the reason in ``refusal`` (``torchtune_longshort.eval.tasks.common.unavailable.refusal_of``).
    """

    token_logprobs: List[float]
    refusal: str

    def __new__(cls, logprob: float, is_greedy: bool, token_logprobs: Sequence[float], refusal: str = ""):
        obj = super().__new__(cls, (logprob, is_greedy))
        obj.token_logprobs = list(token_logprobs)
        obj.refusal = refusal
        return obj

    @classmethod
    def refused(cls, reason: str) -> "TokenLoglikelihood":
        """The result of a request the model refused: NaN, with ``reason``."""
        return cls(float("nan"), False, [], reason)

    def __reduce__(self):
        # lm-eval's request cache pickles results; keep the attributes.
        return (TokenLoglikelihood, (self[0], self[1], self.token_logprobs, self.refusal))


@torch.no_grad()
def forward_hidden(model: nn.Module, batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Causal forward of right-padded ``[b, s]`` token ids -> ``[b, s, d]`` final hidden states."""
    with hidden_state_output(model):
        return model(batch.to(device))


def _padded(chunk: Sequence[Prepared], pad_id: int) -> torch.Tensor:
    """The inputs of ``chunk`` as one right-padded ``[b, s]`` batch."""
    width = max(len(inp) for _, inp, _ in chunk)
    batch = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    for row, (_, inp, _) in enumerate(chunk):
        batch[row, : len(inp)] = torch.tensor(inp, dtype=torch.long)
    return batch


@torch.no_grad()
def score_continuations(
    model: nn.Module,
    prepared: List[Prepared],
    *,
    batch_size: Union[int, BatchPlan],
    pad_id: int,
    vocab_size: int,
    device: torch.device,
    disable_tqdm: bool = False,
    out_of_memory: Optional[Callable[[int, int, str], str]] = None,
    done: Optional[Callable[[int, TokenLoglikelihood], None]] = None,
) -> Dict[int, TokenLoglikelihood]:
    """``{request index: TokenLoglikelihood}``: the summed and per-token log-probabilities of each continuation
    after its input, and whether each continuation token is the argmax.

    ``batch_size``: an integer, or a :class:`~.batch_size.BatchPlan` (lm-eval's ``auto``: a batch that does not fit
    is halved, and CPU batches are bounded by free memory). With a fixed size, a batch that does not fit the device
    runs again a request at a time (:func:`~.memory.run_fitting`); a request that does not fit alone is refused with
    ``out_of_memory(index, input tokens, error)`` as its reason (default:
    :func:`~.memory.out_of_memory_reason`). ``done(index, result)`` is called for each request as its batch ends
    (lm-eval's ``--use_cache`` stores it then, so an interrupted run keeps what it scored)."""
    output = decoder_of(model).output
    results: Dict[int, TokenLoglikelihood] = {}

    def score(chunk: Sequence[Prepared]) -> None:
        hidden = forward_hidden(model, _padded(chunk, pad_id), device)
        parts = []  # per request [sum, greedy, per-token...], read from the device once for the batch
        for row, (i, inp, cont) in enumerate(chunk):
            n = len(cont)
            target = torch.tensor(cont, dtype=torch.long, device=hidden.device)
            tok_lp, greedy = project_target_logprobs(output, hidden[row, len(inp) - n : len(inp)], target, vocab_size)
            tok_lp = tok_lp.double()  # exact: each value equals its float32 one
            parts += [tok_lp.sum().reshape(1), greedy.double().reshape(1), tok_lp]
        values = torch.cat(parts).tolist()
        at = 0
        for i, _, cont in chunk:
            n = len(cont)
            results[i] = TokenLoglikelihood(values[at], values[at + 1] == 1.0, values[at + 2 : at + 2 + n])
            at += 2 + n

    def refuse(item: Prepared, error: str) -> None:
        i, inp, _ = item
        reason = out_of_memory(i, len(inp), error) if out_of_memory else out_of_memory_reason(len(inp), device, error)
        results[i] = TokenLoglikelihood.refused(reason)

    pbar = tqdm(total=len(prepared), disable=disable_tqdm, desc="longshort loglikelihood")
    # longest first (then by tokens, as lm-eval's ``hf`` orders them)
    ordered = sorted(prepared, key=lambda r: (-len(r[1]), r[1]))

    def finished(chunk: Sequence[Prepared]) -> None:
        if done is not None:
            for i, _, _ in chunk:
                done(i, results[i])
        pbar.update(len(chunk))

    plan = batch_size if isinstance(batch_size, BatchPlan) else BatchPlan(batch_size, None, device)
    plan.run(model, ordered, lambda r: len(r[1]), score, refuse, finished, RowMemory.of(model, vocab_size))
    pbar.close()
    return results
