"""lm-eval model ``longshort``: a Hugging Face-format checkpoint of any family in
``torchtune_longshort.models.MODEL_FAMILIES`` run through torchtune.

Use (the model exists only in the pack's CLI wrapper, ``longshort-eval`` = ``python -m torchtune_longshort.eval``,
or in a process that imported this module: stock ``lm-eval`` has no plugin entry point for models)::

    longshort-eval run --model longshort \
        --model_args pretrained=/ckpt,max_length=8192,rope=linear,rope_factor=2 --tasks longshort_ppl

Model arguments (``--model_args k=v,...``) are described and checked in :mod:`torchtune_longshort.eval.model.args`.

Tokenisation follows lm-eval's ``hf`` model token for token (the model's own BOS convention, read from its tokenizer:
Llama-2/3 prepend BOS, Qwen2 and SmolLM2 do not; the prefix token of an empty context is BOS, else EOS;
context/continuation split, rolling windows, and with ``truncation=left`` its left truncation), so that the two give
the same numbers on the same checkpoint.

A request the model will not run (longer than it runs, a prompt it may not cut, no room to generate) is refused,
not cut or crashed on: one decision (:meth:`~torchtune_longshort.eval.model.limits.RequestLimits.plan`) says so and
why, the result carries the reason (``torchtune_longshort.eval.tasks.common.unavailable``), the task scores it NaN
with that reason in the results file, and the rest of the run goes on. So is a request that runs out of device
memory by itself; a batch that does, runs again a request at a time (:mod:`~torchtune_longshort.eval.model.memory`),
or with ``batch_size=auto`` in halves (:mod:`~torchtune_longshort.eval.model.batch_size`).

Beyond lm-eval's three request types the model answers ``next_token_divergence`` requests (the
``longshort_misalignment`` task): it runs the model on two suffixes of a text and compares the full next-token
distributions (paper Eq. 4).
Scoring lives in :mod:`~torchtune_longshort.eval.model.scoring`, decoding in
:mod:`~torchtune_longshort.eval.model.generation`, ``generate_until`` in
:mod:`~torchtune_longshort.eval.model.generate_requests`.
"""

from __future__ import annotations

import logging
import sys
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import lm_eval.models  # noqa: F401  (fills lm-eval's registry first: it only self-populates when empty)
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from tqdm.auto import tqdm

from torchtune_longshort.eval.console_log import follow_lm_eval_logging
from torchtune_longshort.eval.model.divergence import divergence
from torchtune_longshort.eval.model.chat import (no_template_message, render, select_template, template_name,
                                                 template_tokenizer)
from torchtune_longshort.eval.model.generate_requests import GenerationRequests
from torchtune_longshort.eval.model.args import load_checkpoint_model, parse_model_args
from torchtune_longshort.eval.model.batch_size import BatchPlan
from torchtune_longshort.eval.model.limits import RequestLimits
from torchtune_longshort.eval.model.memory import out_of_memory_reason
from torchtune_longshort.eval.model.processes import Processes
from torchtune_longshort.eval.model.response_cache import (answered_through_cache, cache_identity, claim_cache,
                                                           drop_refusals)
from torchtune_longshort.eval.model.scoring import TokenLoglikelihood, forward_hidden, score_continuations
from torchtune_longshort.hidden_states import decoder_of, project_logprobs
from torchtune_longshort.provenance import provenance

__all__ = ["LongShortLM", "TokenLoglikelihood"]

logger = logging.getLogger(__name__)


@register_model("longshort")
class LongShortLM(GenerationRequests, TemplateLM):
    """lm-eval model for HF-format checkpoints of the family table, loaded into torchtune (see module docstring)."""

    def __init__(self, pretrained: Optional[str] = None, **model_args: Any) -> None:
        super().__init__()
        follow_lm_eval_logging()  # its lines print as lm-eval's own (where lm-eval's logging is set up)
        args = parse_model_args(pretrained=pretrained, **model_args)
        self.args = args
        self.checkpoint_dir = args.checkpoint_dir
        self.checkpoint_fingerprint = args.folder.fingerprint()
        self.rope_spec = args.rope_spec
        self.limits = RequestLimits.of_model_args(args)
        self.tokenizer = args.tokenizer
        self.processes = Processes(args.device)  # under torchrun / accelerate launch: this process's share
        self._rank, self._world_size = self.processes.rank, self.processes.world_size
        self.model = load_checkpoint_model(args)
        self.batches = BatchPlan(args.batch_size, args.batch_auto, args.device)  # fixed, or lm-eval's auto
        self.batch_sizes = self.batches.sizes  # what auto ran: lm-eval writes its values in the results' config
        self.vocab_size = int(args.hf_config["vocab_size"])
        self._chat: Optional[Any] = None  # transformers' tokenizer of the chat template, once asked for
        self._chat_name: Optional[str] = None  # the template name chat_template() picked last (None: the default)

    def set_cache_hook(self, cache_hook) -> None:
        """lm-eval's ``--use_cache`` hands its response cache here first: one holding another model's answers is
        refused, refusals stored by an earlier run are dropped, so a rerun asks them again (:mod:`.response_cache`)."""
        super().set_cache_hook(cache_hook)
        if getattr(cache_hook, "dbdict", None) is not None:
            claim_cache(cache_hook.dbdict, cache_identity(self.args, self.checkpoint_fingerprint))
            drop_refusals(cache_hook.dbdict)

    # ------------------------------------------------------------------ lm-eval's data-parallel API
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.processes.all_gather(tensor)

    def gather_object(self, obj: Any, dst: int = 0):
        return self.processes.gather_object(obj, dst, caller=sys._getframe(1))  # lm-eval's evaluate()

    def barrier(self) -> None:
        self.processes.barrier()

    def _no_bar(self, disable_tqdm: bool) -> bool:
        """Whether this process shows no progress bar: rank 0 alone shows one, as lm-eval's ``hf`` does (under
        torchrun every process drew its own, each line of the console twice)."""
        return disable_tqdm or self.rank != 0

    # ------------------------------------------------------------------ lm-eval properties
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_id

    @property
    def prefix_token_id(self) -> int:
        """The token an empty context starts from: BOS, or EOS for a model without one (lm-eval ``hf``'s rule)."""
        return self.tokenizer.bos_id if self.tokenizer.bos_id is not None else self.tokenizer.eos_id

    @property
    def max_length(self) -> int:
        return self.args.max_length

    @property
    def max_gen_toks(self) -> int:
        return self.args.max_gen_toks

    @property
    def batch_size(self) -> str:
        return self.args.batch_size_text

    @property
    def device(self) -> torch.device:
        return self.args.device

    @property
    def tokenizer_name(self) -> str:
        return str(self.tokenizer.path)

    def chat_template(self, chat_template: Any = False) -> Optional[str]:
        """lm-eval's ``--apply_chat_template [name]``: the tokenizer folder's template (:mod:`.chat`), None when it
        has none (as lm-eval's ``hf`` answers: lm-eval asks it for the results file before any task runs, and a run
        whose tasks all ignore the option, ``longshort_ppl`` alone, needs none). A name picks one of the tokenizer's
        named templates, as ``hf`` picks it (an unknown name: ``ValueError`` naming those it has; a tokenizer with
        a single template: one warning), no name the default. The prompts render through the template this
        answered last (lm-eval asks once per run, with the option's value, before the prompts): the template the
        results record is the one the prompts render through."""
        if chat_template is False or chat_template is None or self._chat_tokenizer() is None:
            return None
        name = template_name(chat_template)
        template, warning = select_template(self._chat.chat_template, name, self.tokenizer.path)
        self._chat_name = name  # what the prompts render through (an unknown name, refused above, changes nothing)
        if warning:
            logger.warning(warning)
        return template

    def _chat_tokenizer(self) -> Optional[Any]:
        if self._chat is None:
            self._chat = template_tokenizer(self.tokenizer.path)
        return self._chat

    def apply_chat_template(self, chat_history: List[Dict[str, str]], add_generation_prompt: bool = True) -> str:
        """A prompt through the template picked (the tokenizer's default where lm-eval asked for none); refused in
        one line when the tokenizer has none (``longshort-eval`` refuses such a run before it starts, unless every
        task ignores the option)."""
        if self._chat_tokenizer() is None:
            raise ValueError(no_template_message(self.tokenizer.path))
        template, _ = select_template(self._chat.chat_template, self._chat_name, self.tokenizer.path)
        return render(self._chat, chat_history, add_generation_prompt, template)

    def get_model_info(self) -> dict:
        """Extra fields for lm-eval's results ``config`` block, with the project's provenance block (lm-eval calls
        this after the evaluation, so the stdlib corpus hash is there when a task used the corpus)."""
        return {
            "checkpoint_dir": str(self.checkpoint_dir),
            "checkpoint_fingerprint": self.checkpoint_fingerprint,
            "model_family": self.args.folder.family.name,
            "tokenizer": f"{self.tokenizer.format}: {self.tokenizer.path}",
            "rope": self.rope_spec,
            "max_length": self.args.max_length,
            "usable_length": self.args.usable_length,
            "truncation": self.args.truncation,
            "max_batch_size": self.args.batch_size if self.args.batch_auto else None,
            "model_dtype": str(self.args.dtype),
            "provenance": provenance(device=str(self.args.device)),
        }

    # ------------------------------------------------------------------ tokenisation
    def tok_encode(self, string: str, add_special_tokens: Optional[bool] = None, **kwargs) -> List[int]:
        """Token ids of ``string`` by lm-eval ``hf``'s rules: the tokenizer's own special tokens (BOS where the
        model's tokenizer adds one) unless ``add_special_tokens=False``; none when the string already starts with
        the prefix token's text. ``add_bos_token=true/false`` is what ``hf`` hands ``AutoTokenizer``: BOS first or
        not, whatever ``add_special_tokens`` says, and nothing for a tokenizer without a BOS (Qwen2's: never its
        EOS, which would be scored as the text's first token)."""
        tok = self.tokenizer
        forced = self.args.add_bos_token
        if add_special_tokens is None:
            if string.startswith(tok.token_text(self.prefix_token_id)):
                add_special_tokens = False
            elif forced is not None:
                add_special_tokens = forced
        if add_special_tokens is False:
            return tok.encode_plain(string)
        ids = tok.encode_plain(string)
        if (tok.adds_bos if forced is None else forced) and tok.bos_id is not None:
            ids = [tok.bos_id] + ids
        return ids + [tok.eos_id] if tok.adds_eos else ids

    def tok_decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens`` with special tokens dropped."""
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    # ------------------------------------------------------------------ full distributions
    @torch.no_grad()
    def next_token_logprobs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Full next-token distributions: ``[len(token_ids), vocab]`` float32 log-probabilities, row ``i`` being
        ``log p(. | token_ids[: i + 1])``. The input is used as is (no BOS is added)."""
        ids = list(token_ids)
        self.limits.check_length(len(ids), "next_token_logprobs")
        hidden = forward_hidden(self.model, torch.tensor([ids], dtype=torch.long), self.device)[0]
        return project_logprobs(decoder_of(self.model).output, hidden, self.vocab_size)

    def _out_of_memory(self, task: Optional[str], n_tokens: int, error: str) -> str:
        """The reason a request that does not fit the device alone carries (logged once per task)."""
        return self.limits.refuse(task, out_of_memory_reason(n_tokens, self.device, error), "out of memory")

    # ------------------------------------------------------------------ loglikelihood
    def _prepare_loglikelihood(self, i: int, ctx: List[int], cont: List[int], task: Optional[str], doc):
        """``(input tokens, None)`` for a request the model runs, else ``(None, refused result)``: the context cut
        only where the task or ``truncation`` allows it (:meth:`RequestLimits.fit`, the one decision)."""
        if len(ctx) == 0 or len(cont) == 0:
            raise ValueError(f"request {i}: empty context or continuation tokens (context={ctx}, cont={cont})")
        kept, plan = self.limits.fit(ctx, len(cont), "loglikelihood", doc, slack=1)
        if kept is None:
            return None, TokenLoglikelihood.refused(self.limits.refuse(task, plan))
        return (kept + cont)[:-1], None

    def _loglikelihood_tokens(
        self,
        requests: List[Tuple[Tuple[str, str], List[int], List[int]]],
        disable_tqdm: bool = False,
        override_bs: Optional[int] = None,
        task_names: Optional[List[Optional[str]]] = None,
        docs: Optional[List[Optional[Dict[str, Any]]]] = None,
        done: Optional[Callable[[int, TokenLoglikelihood], None]] = None,
    ) -> List[Tuple[float, bool]]:
        """Score continuation tokens given context tokens, batched (longest first, right-padded).

        A context+continuation longer than ``max_length + 1`` tokens loses context tokens (left or middle) only
        when the request's task declares that truncation (its doc) or ``truncation`` allows it; otherwise, and
        for a continuation longer than ``max_length``, the result is ``(nan, False)`` with the reason.
        ``done(index, result)``: called for each request once its result is known (its batch ended).
        """
        task_names = task_names or [None] * len(requests)
        docs = docs or [None] * len(requests)
        results: List[Optional[TokenLoglikelihood]] = [None] * len(requests)
        prepared = []
        for i, ((_, ctx, cont), task, doc) in enumerate(zip(requests, task_names, docs)):
            inp, results[i] = self._prepare_loglikelihood(i, ctx, cont, task, doc)
            if inp is not None:
                prepared.append((i, inp, cont))
            elif done is not None:
                done(i, results[i])
        scored = score_continuations(
            self.model, prepared, batch_size=override_bs or self.batches, pad_id=self.tokenizer.pad_id,
            vocab_size=self.vocab_size, device=self.device, disable_tqdm=self._no_bar(disable_tqdm),
            out_of_memory=lambda i, n, error: self._out_of_memory(task_names[i], n, error), done=done,
        )
        for i, result in scored.items():
            results[i] = result
        return results  # type: ignore[return-value]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> List[Tuple[float, bool]]:
        """lm-eval ``loglikelihood``: TemplateLM's encoding (same as ``hf``), then batched scoring. Each result
        goes to lm-eval's response cache (``--use_cache``) as its batch ends, as ``hf`` stores them: an interrupted
        run's rerun asks only what it had not scored."""
        new_reqs = []
        for context, continuation in [req.args for req in requests]:
            if context == "":
                cont_enc = self.tok_encode(continuation, add_special_tokens=False)
                ctx_enc, cont_enc = (
                    ([self.prefix_token_id], cont_enc)
                    if self.prefix_token_id != cont_enc[0]
                    else (cont_enc[:1], cont_enc[1:])
                )
            else:
                ctx_enc, cont_enc = self._encode_pair(context, continuation)
            new_reqs.append(((context, continuation), ctx_enc, cont_enc))
        return self._loglikelihood_tokens(
            new_reqs,
            disable_tqdm=disable_tqdm,
            task_names=[getattr(r, "task_name", None) for r in requests],
            docs=[getattr(r, "doc", None) for r in requests],
            done=lambda i, res: self.cache_hook.add_partial("loglikelihood", requests[i].args, res),
        )

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> List[float]:
        """lm-eval ``loglikelihood_rolling``: disjoint windows of ``max_length`` tokens, exactly as ``hf`` builds
        them (BOS-prefixed token list, prefix token BOS), scored with batching across windows; a request's total
        (its windows' sum, in window order) goes to the response cache once its last window is scored."""
        windows, owners, tasks, spans = [], [], [], []
        for idx, req in enumerate(requests):
            first = len(windows)
            for w in map(lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(req.args[0]), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1)):
                windows.append((None,) + w)
                owners.append(idx)
                tasks.append(getattr(req, "task_name", None))
            spans.append(range(first, len(windows)))
        scores: Dict[int, float] = {}
        left = [len(span) for span in spans]

        def done(window: int, score: TokenLoglikelihood) -> None:
            scores[window], idx = score[0], owners[window]
            left[idx] -= 1
            if left[idx] == 0:
                total = sum((scores[w] for w in spans[idx]), 0.0)
                self.cache_hook.add_partial("loglikelihood_rolling", requests[idx].args, total)

        self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm, task_names=tasks, done=done)
        return [sum((scores[w] for w in span), 0.0) for span in spans]

    # ------------------------------------------------------------------ misalignment (paper Eq. 4)
    def next_token_divergence(self, requests, disable_tqdm: bool = False) -> List[Dict[str, float]]:
        """Requests ``(text, {"l1": int, "l2": int, "divergences": [...]})`` (task ``longshort_misalignment``):
        divergences between the next-token distributions after the last ``l1`` and the last ``l2`` tokens of
        ``text`` (encoded without BOS), via ``torchtune_longshort.metrics.suffix_misalignment``. A text shorter than
        ``max(l1, l2)`` tokens or longer than the model can run gets NaN values and an error message. Under
        ``--use_cache`` the answers go through lm-eval's response cache (:func:`~torchtune_longshort.eval.model.
        response_cache.answered_through_cache`)."""
        bar = tqdm(requests, disable=self._no_bar(disable_tqdm), desc="longshort next_token_divergence")
        return answered_through_cache(self.cache_hook, "next_token_divergence", bar, partial(divergence, self))
