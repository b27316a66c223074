"""Test helpers for the task pack: a stand-in lm-eval model that answers from a request's text alone, and a run of
the pack's tasks through lm-eval's own evaluator (in-process, the pack indexed alone: about a second a run)."""

from __future__ import annotations

from typing import Any, Dict, List

from lm_eval.api.model import LM


class TextLM(LM):
    """Scores a log-likelihood request by its text alone (-(characters of context and continuation)), so a request
    built from another sequence, or with text before it, scores differently; generates nothing. Its chat template
    wraps the messages in a system prompt."""

    tokenizer_name = "text-lm"

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> List[tuple]:
        return [(-float(len(r.args[0]) + len(r.args[1])), False) for r in requests]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError

    def generate_until(self, requests, disable_tqdm: bool = False) -> List[str]:
        return ["" for _ in requests]

    def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:
        return "<system>You are helpful.</system>" + "".join(m["content"] for m in chat_history)


def run_pack(task: str, metadata: Dict[str, Any], model: Any = None, **kwargs: Any) -> Dict[str, Any]:
    """lm-eval's ``simple_evaluate`` of the pack's ``task`` (``model``: default a :class:`TextLM`), ``metadata`` as
    ``--metadata`` gives it, ``kwargs`` as lm-eval's options (``limit``, ``num_fewshot``, ``cache_requests``, ...)."""
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval.tasks import tasks_path

    tm = TaskManager(include_path=str(tasks_path()), include_defaults=False, metadata=metadata)
    return simple_evaluate(model=model or TextLM(), tasks=[task], task_manager=tm, bootstrap_iters=0, **kwargs)
