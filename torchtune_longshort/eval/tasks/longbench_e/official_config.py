"""LongBench's own per-dataset tables for the pack's LongBench-E tasks, and its prompt (:func:`doc_to_text`).

The tables are LongBench's (THUDM/LongBench): each dataset's category and metric (``eval.py``'s dataset2metric),
its prompt (``config/dataset2prompt.json``), the few-shot datasets scored on their first line, the generation
lengths of those generated with no stop string (``config/dataset2maxlen.json``) and the datasets sent without the
model's chat template (``pred.py``). :mod:`.task` scores with them, and ``python -m
torchtune_longshort.eval.tasks.generate`` writes the task YAMLs from them; the YAMLs name :func:`doc_to_text` by
its old path, ``longbench_e.task.doc_to_text`` (re-exported there).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

# dataset -> (LongBench category, metric). The 13 LongBench-E datasets and their official metrics
# (LongBench eval.py's dataset2metric; pred.py's ``--e`` list).
LONGBENCH_E_DATASETS: Dict[str, tuple] = {
    "qasper": ("single", "qa_f1"),
    "multifieldqa_en": ("single", "qa_f1"),
    "hotpotqa": ("multi", "qa_f1"),
    "2wikimqa": ("multi", "qa_f1"),
    "gov_report": ("summarization", "rouge"),
    "multi_news": ("summarization", "rouge"),
    "trec": ("fewshot", "classification"),
    "triviaqa": ("fewshot", "qa_f1"),
    "samsum": ("fewshot", "rouge"),
    "passage_count": ("synthetic", "count"),
    "passage_retrieval_en": ("synthetic", "retrieval"),
    "lcc": ("code", "code_sim"),
    "repobench-p": ("code", "code_sim"),
}

# LongBench eval.py keeps only the first line of the prediction, after leading newlines, for these (few-shot) datasets.
FIRST_LINE_DATASETS = frozenset({"trec", "triviaqa", "samsum", "lsht"})
# ... and pred.py generates trec and triviaqa with no stop string, samsum up to its first "\n" token, the first
# new token not "\n" (lm-eval's shipped tasks stop all three at "\n" and strip: a leading newline gave an empty
# answer): the pack's tasks of these datasets generate this many tokens (LongBench's dataset2maxlen) with
# ``until: []`` and score the first line, which is samsum's answer too unless the model's first token is "\n".
NO_STOP_MAX_GEN_TOKS = {"trec": 64, "triviaqa": 32, "samsum": 128}
# pred.py wraps every prompt in the model's chat template except these ("chat models are better off without build
# prompts on these tasks"): their tasks leave lm-eval's --apply_chat_template out, with one warning each (PackTask's
# NO_CHAT_KEY; LongBench's lsht, the sixth, is not in LongBench-E).
NO_CHAT_TEMPLATE = ("trec", "triviaqa", "samsum", "lcc", "repobench-p")
# LongBench's prompt of each dataset, verbatim from its config/dataset2prompt.json (THUDM/LongBench); pred.py fills
# it with ``prompt_format.format(**sample)`` (:func:`doc_to_text`). lm-eval 0.4.13's shipped longbench_*_e files
# differ in six: triviaqa and samsum join the context and the question with one newline (LongBench: a blank line),
# passage_count and passage_retrieval_en drop the trailing space after "is:", lcc and repobench-p the newline after
# "Next line of code:".
PROMPTS: Dict[str, str] = {
    "qasper": (
        "You are given a scientific article and a question. Answer the question as concisely "
        "as you can, using a single phrase or sentence if possible. If the question cannot "
        "be answered based on the information in the article, write \"unanswerable\". If the "
        "question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide "
        "any explanation.\n\nArticle: {context}\n\n Answer the question based on the above article "
        "as concisely as you can, using a single phrase or sentence if possible. If the question "
        "cannot be answered based on the information in the article, write \"unanswerable\". "
        "If the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do "
        "not provide any explanation.\n\nQuestion: {input}\n\nAnswer:"
    ),
    "multifieldqa_en": (
        "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following "
        "question based on the above text, only give me the answer and do not output any "
        "other words.\n\nQuestion: {input}\nAnswer:"
    ),
    "hotpotqa": (
        "Answer the question based on the given passages. Only give me the answer and do "
        "not output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer "
        "the question based on the given passages. Only give me the answer and do not output "
        "any other words.\n\nQuestion: {input}\nAnswer:"
    ),
    "2wikimqa": (
        "Answer the question based on the given passages. Only give me the answer and do "
        "not output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer "
        "the question based on the given passages. Only give me the answer and do not output "
        "any other words.\n\nQuestion: {input}\nAnswer:"
    ),
    "gov_report": (
        "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n{con"
        "text}\n\nNow, write a one-page summary of the report.\n\nSummary:"
    ),
    "multi_news": (
        "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\nNow, "
        "write a one-page summary of all the news.\n\nSummary:"
    ),
    "trec": (
        "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{in"
        "put}"
    ),
    "triviaqa": (
        "Answer the question based on the given passage. Only give me the answer and do not "
        "output any other words. The following are some examples.\n\n{context}\n\n{input}"
    ),
    "samsum": (
        "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{inp"
        "ut}"
    ),
    "passage_count": (
        "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. "
        "Please carefully read these paragraphs and determine how many unique paragraphs "
        "there are after removing duplicates. In other words, how many non-repeating paragraphs "
        "are there in total?\n\n{context}\n\nPlease enter the final count of unique paragraphs "
        "after removing duplicates. The output format should only contain the number, such "
        "as 1, 2, 3, and so on.\n\nThe final answer is: "
    ),
    "passage_retrieval_en": (
        "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine "
        "which paragraph the abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease "
        "enter the number of the paragraph that the abstract is from. The answer format must "
        "be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe answer is: "
    ),
    "lcc": (
        "Please complete the code given below. \n{context}Next line of code:\n"
    ),
    "repobench-p": (
        "Please complete the code given below. \n{context}{input}Next line of code:\n"
    ),
}

# LongBench's category of each dataset -> the title of its group.
CATEGORIES = {"single": "Single-Document QA", "multi": "Multi-Document QA", "summarization": "Summarization",
              "fewshot": "Few-shot Learning", "synthetic": "Synthetic Tasks", "code": "Code Completion"}


def dataset_base_name(name: str) -> str:
    """``"qasper_e"`` or ``"qasper"`` -> ``"qasper"``; raises for a name outside LongBench-E's 13."""
    base = name[:-2] if name.endswith("_e") else name
    if base not in LONGBENCH_E_DATASETS:
        raise ValueError(
            f"dataset={name!r} is not one of the 13 LongBench-E datasets; accepted: "
            f"{sorted(LONGBENCH_E_DATASETS)} (optionally with the '_e' suffix)"
        )
    return base


def doc_to_text(doc: Mapping[str, Any]) -> str:
    """lm-eval ``doc_to_text``: LongBench's prompt of the sample's dataset (:data:`PROMPTS`), filled as its
    ``pred.py`` fills it, ``str.format`` over the sample's fields (``context``, ``input``)."""
    return PROMPTS[dataset_base_name(str(doc["dataset"]))].format(**doc)
