"""BABILong's ``get_formatted_input`` strips the whole filled template, not only the context: a question that ends in
a newline or spaces (as a hand-made or re-exported row may) is sent without them. Reference: BABILong's function and
prompts as tests/test_babilong_official_prompt.py restates them (booydar/babilong@ffa075fb, verbatim). An empty
``babilong_prompt`` is the default, lm-eval's prompt, as an absent one is."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from test_babilong_official_prompt import DEFAULT_PROMPTS, QAS, get_formatted_input  # noqa: E402

from torchtune_longshort.eval.tasks.babilong.official_prompts import check_prompt_style, doc_to_text  # noqa: E402


@pytest.mark.parametrize("qa", QAS)
@pytest.mark.parametrize("question", ["Where is Mary?\n", "Who got the apple?  ", " What is west of the bedroom?"])
def test_the_whole_text_is_stripped_as_babilong_strips_it(qa, question):
    doc = {"qa": qa, "input": "  Mary went to the kitchen.\n", "question": question, "target": ""}
    p = DEFAULT_PROMPTS[qa]
    assert doc_to_text(doc) == get_formatted_input(doc["input"], question, p["examples"], p["instruction"],
                                                   p["post_prompt"])


def test_an_empty_prompt_style_is_the_default_one():
    assert check_prompt_style("") == check_prompt_style(None) == "lm_eval"
