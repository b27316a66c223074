"""The request a ``longshort_babilong_qa<N>`` task sends for a row, as lm-eval builds it, and the tokens it needs.

BABILong's length labels (``"32k"``) are token budgets. A row's ``input`` (haystack + facts) is only part of the
request: the task puts lm-eval's prompt around it (the instructions and two examples of lm-eval's own
``babilong_qa<N>`` task before it, the question after it) and the model then generates up to ``max_gen_toks``
tokens. A ``"32k"`` row whose input alone is 32768 tokens is therefore a request a 32768-token model refuses. The
generator's ``fit="prompt"`` (:mod:`~torchtune_longshort.eval.tasks.babilong.generator`) sizes the whole request to
the label instead, measured here: the task is built from the pack's own YAML by lm-eval's ``TaskManager`` and asked
for the text it sends (its ``fewshot_context``), so the generator and the task cannot disagree.

The prompt is lm-eval's by default; ``--metadata '{"babilong_prompt": "babilong"}'`` gives BABILong's own
(:mod:`.official_prompts`): :class:`BabilongTask`, the tasks' lm-eval class, builds the task with it.
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from torchtune_longshort.eval.tasks import tasks_path
from torchtune_longshort.eval.tasks.babilong.official_prompts import (
    MAX_NEW_TOKENS,
    PROMPT_KEY,
    PROMPT_STYLES,
    check_prompt_style,
    doc_to_text,
)
from torchtune_longshort.eval.tasks.babilong.stories import check_qa
from torchtune_longshort.eval.tasks.babilong.task import task_of
from torchtune_longshort.eval.tasks.common.pack_task import DEFAULT_MAX_GEN_TOKS, PackTask

# What BABILong's own prompt changes in a task's config: no description and no few-shot turns (its instruction and
# examples are in the one text, doc_to_text), and BABILong's generation (greedy, 20 tokens, no stop string).
BABILONG_PROMPT_CONFIG = {
    "description": "",
    "num_fewshot": 0,
    "fewshot_config": None,
    "doc_to_text": doc_to_text,
    "generation_kwargs": {"do_sample": False, "temperature": 0.0, "max_gen_toks": MAX_NEW_TOKENS, "until": []},
}


class BabilongTask(PackTask):
    """The lm-eval class of the ``longshort_babilong_qa<N>`` tasks: :class:`PackTask` with lm-eval's prompt (the
    task file's), or with ``babilong_prompt: babilong`` in ``--metadata`` BABILong's own
    (:data:`BABILONG_PROMPT_CONFIG`; lm-eval's ``--num_fewshot`` is then ignored, as for any task whose config says 0
    shots). Any other value is refused (``ValueError``) before the task is built."""

    def __init__(self, config=None, **kwargs):
        config = dict(config or {})
        if check_prompt_style((config.get("metadata") or {}).get(PROMPT_KEY)) == "babilong":
            config.update(copy.deepcopy(BABILONG_PROMPT_CONFIG))  # lm-eval's --gen_kwargs update a task's own dict
        super().__init__(config=config, **kwargs)


@dataclass(frozen=True)
class TaskPrompt:
    """The prompt of one BABILong task (``qa``), its style (``babilong_prompt``) and its generation budget
    (``max_gen_toks``, the task's)."""

    qa: str
    max_gen_toks: int
    task: Any  # the lm-eval task object
    style: str = PROMPT_STYLES[0]

    def text(self, input_text: str, question: str) -> str:
        """The text the task sends for a row with this ``input`` and ``question`` (lm-eval's ``fewshot_context``)."""
        doc = {"input": input_text, "question": question, "target": "", "qa": self.qa}
        return self.task.fewshot_context(doc, num_fewshot=self.task.config.num_fewshot)

    def request_tokens(self, input_text: str, question: str, count_tokens: Callable[[str], int]) -> int:
        """What the request needs of the model's ``max_length``: a BOS (counted whether or not the tokenizer adds
        one, as the pack counts prompts), the prompt's tokens and the generation budget."""
        return 1 + count_tokens(self.text(input_text, question)) + self.max_gen_toks


@functools.lru_cache(maxsize=None)
def task_prompt(qa: str, style: str = PROMPT_STYLES[0]) -> TaskPrompt:
    """The :class:`TaskPrompt` of task ``qa`` (``"qa1"`` .. ``"qa5"``) under prompt ``style`` (``babilong_prompt``:
    ``lm_eval`` or ``babilong``): the pack's ``longshort_babilong_<qa>`` built by lm-eval (offline: its data is one
    empty row written for the purpose)."""
    from lm_eval.tasks import TaskManager

    check_qa(qa)
    check_prompt_style(style)
    with tempfile.TemporaryDirectory(prefix="babilong_prompt_") as tmp:
        (Path(tmp) / "0k").mkdir()
        (Path(tmp) / "0k" / f"{qa}.jsonl").write_text(json.dumps({"input": "", "question": "", "target": ""}) + "\n")
        manager = TaskManager(include_path=str(tasks_path()), include_defaults=False,
                              metadata={"babilong_data_dir": tmp, "max_seq_lengths": "0k", PROMPT_KEY: style})
        task = manager.load([task_of(qa)])["tasks"][task_of(qa)]
    max_gen = int((task.config.generation_kwargs or {}).get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
    return TaskPrompt(qa, max_gen, task, style)
