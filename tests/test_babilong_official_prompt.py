"""``babilong_prompt: babilong`` sends BABILong's own prompt: for rows of each of QA1-QA5 the text the pack's task
sends (the request lm-eval builds, chat template or not) equals BABILong's ``get_formatted_input`` with
``DEFAULT_TEMPLATE`` and ``DEFAULT_PROMPTS[qa]``, and it generates BABILong's 20 tokens; the default stays lm-eval's
prompt; a misspelled value is refused in one line before a run.

The reference below is BABILong's, booydar/babilong ``babilong/prompts.py`` at commit
ffa075fb7aff504275037efc04d3aeaa5b1f65b0 (Apache-2.0): its template and QA1-QA5 prompts copied verbatim, and its
``get_formatted_input`` restated (the template filled, the context stripped, the whole stripped)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.tasks import check_metadata_values, tasks_path  # noqa: E402
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError  # noqa: E402

# booydar/babilong@ffa075fb7aff504275037efc04d3aeaa5b1f65b0 babilong/prompts.py, verbatim
TASK_TEMPLATE = '{instruction}\n\n{examples}\n\n{post_prompt}'
USER_TEMPLATE = '<context>\n{context}\n</context>\n\nQuestion: {question}'
DEFAULT_TEMPLATE = f'{TASK_TEMPLATE}\n\n{USER_TEMPLATE}'
DEFAULT_PROMPTS = {
    'qa1': {
        'instruction':
            'I will give you context with the facts about positions of different persons hidden in some random text '
            'and a question. You need to answer the question based only on the information from the facts. '
            'If a person was in different locations, use the latest location to answer the question.',
        'examples':
            '<example>\n'
            'Charlie went to the hallway. Judith come back to the kitchen. Charlie travelled to balcony. '
            'Where is Charlie?\n'
            'Answer: The most recent location of Charlie is balcony.\n'
            '</example>\n\n'
            '<example>\n'
            'Alan moved to the garage. Charlie went to the beach. Alan went to the shop. Rouse '
            'travelled to balcony. Where is Alan?\n'
            'Answer: The most recent location of Alan is shop.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: '
            'The most recent location of ’person’ is ’location’. Do not write anything else after that.'
    },
    'qa2': {
        'instruction':
            'I give you context with the facts about locations and actions of different persons '
            'hidden in some random text and a question.'
            'You need to answer the question based only on the information from the facts.\n'
            'If a person got an item in the first location and travelled to the second location '
            'the item is also in the second location. '
            'If a person dropped an item in the first location and moved to the second location '
            'the item remains in the first location.',
        'examples':
            '<example>\n'
            'Charlie went to the kitchen. Charlie got a bottle. Charlie moved to the balcony. '
            'Where is the bottle?\n'
            'Answer: The bottle is in the balcony.\n'
            '</example>\n'
            '<example>\n'
            'Alan moved to the garage. Alan got a screw driver. Alan moved to the kitchen. Where '
            'is the screw driver?\n'
            'Answer: The screw driver is in the kitchen.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: The ’item’ is in ’location’. '
            'Do not write anything else after that.'
    },
    'qa3': {
        'instruction':
            'I give you context with the facts about locations and actions of different persons '
            'hidden in some random text and a question. '
            'You need to answer the question based only on the information from the facts.\n'
            'If a person got an item in the first location and travelled to the second location '
            'the item is also in the second location. '
            'If a person dropped an item in the first location and moved to the second location '
            'the item remains in the first location.',
        'examples':
            '<example>\n'
            'John journeyed to the bedroom. Mary grabbed the apple. Mary went back to the bathroom. '
            'Daniel journeyed to the bedroom. Daniel moved to the garden. Mary travelled to the kitchen. '
            'Where was the apple before the kitchen?\n'
            'Answer: Before the kitchen the apple was in the bathroom.\n'
            '</example>\n'
            '<example>\n'
            'John went back to the bedroom. John went back to the garden. John went back to the kitchen. '
            'Sandra took the football. Sandra travelled to the garden. Sandra journeyed to the bedroom. '
            'Where was the football before the bedroom?\n'
            'Answer: Before the bedroom the football was in the garden.\n'
            '</example>',
        'post_prompt':
            'Always return your answer in the following format: '
            'Before the $location_1$ the $item$ was in the $location_2$. Do not write anything else after that.'
    },
    'qa4': {
        'instruction':
            'I will give you context with the facts about different people, their location and actions, hidden in '
            'some random text and a question. '
            'You need to answer the question based only on the information from the facts.',
        'examples':
            '<example>\n'
            'The hallway is south of the kitchen. The bedroom is north of the kitchen. '
            'What is the kitchen south of?\n'
            'Answer: bedroom\n'
            '</example>\n'
            '<example>\n'
            'The garden is west of the bedroom. The bedroom is west of the kitchen. What is west of the bedroom?\n'
            'Answer: garden\n'
            '</example>',
        'post_prompt':
            'Your answer should contain only one word - location. Do not write anything else after that.'
    },
    'qa5': {
        'instruction':
            'I will give you context with the facts about locations and their relations hidden in some random text '
            'and a question. You need to answer the question based only on the information from the facts.',
        'examples':
            '<example>\n'
            'Mary picked up the apple there. Mary gave the apple to Fred. Mary moved to the bedroom. '
            'Bill took the milk there. Who did Mary give the apple to?\n'
            'Answer: Fred\n'
            '</example>\n'
            '<example>\n'
            'Jeff took the football there. Jeff passed the football to Fred. Jeff got the milk there. '
            'Bill travelled to the bedroom. Who gave the football?\n'
            'Answer: Jeff\n'
            '</example>\n'
            '<example>\n'
            'Fred picked up the apple there. Fred handed the apple to Bill. Bill journeyed to the bedroom. '
            'Jeff went back to the garden. What did Fred give to Bill?\n'
            'Answer: apple\n'
            '</example>',
        'post_prompt':
            'Your answer should contain only one word. Do not write anything else after that. '
            'Do not explain your answer.'
    },
}


def get_formatted_input(context, question, examples, instruction, post_prompt, template=DEFAULT_TEMPLATE):
    """BABILong's get_formatted_input, restated: the template filled (the context stripped), the result stripped."""
    return template.format(instruction=instruction, examples=examples, post_prompt=post_prompt,
                           context=context.strip(), question=question).strip()


QAS = ("qa1", "qa2", "qa3", "qa4", "qa5")
# a few rows per task; whitespace around the input, as BABILong's haystacks have it, is stripped by the reference
ROWS = [{"input": "\n  Mary went to the kitchen. Some unrelated text.\nJohn moved to the garden.  \n",
         "question": "Where is Mary?", "target": "kitchen"},
        {"input": "The apple is here. Fred got the apple there.", "question": "Who got the apple?", "target": "Fred"}]


def _task(folder, **metadata):
    from lm_eval.tasks import TaskManager

    def load(qa):
        name = f"longshort_babilong_{qa}"
        meta = {"babilong_data_dir": str(folder), "max_seq_lengths": "0k", **metadata}
        return TaskManager(include_path=str(tasks_path()), include_defaults=False,
                           metadata=meta).load([name])["tasks"][name]
    return load


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("babilong_prompt")
    (out / "0k").mkdir()
    for qa in QAS:
        target = "Fred" if qa == "qa5" else "kitchen"  # a label of the task: the loader refuses another
        (out / "0k" / f"{qa}.jsonl").write_text("".join(json.dumps({**r, "target": target}) + "\n" for r in ROWS))
    return out


@pytest.mark.parametrize("qa", QAS)
def test_the_babilong_prompt_is_babilongs_get_formatted_input(folder, qa):
    task = _task(folder, babilong_prompt="babilong")(qa)
    task.build_all_requests(rank=0, world_size=1)
    prompts = DEFAULT_PROMPTS[qa]
    assert len(task.instances) == len(ROWS)
    for inst in task.instances:
        want = get_formatted_input(inst.doc["input"], inst.doc["question"], prompts["examples"],
                                   prompts["instruction"], prompts["post_prompt"])
        text, gen_kwargs = inst.arguments
        assert text == want
        # scripts/run_model_on_babilong.py: greedy, max_new_tokens=20, no stop string
        assert gen_kwargs["max_gen_toks"] == 20 and gen_kwargs["until"] == [] and gen_kwargs["do_sample"] is False
    # under a chat template the whole text is the one user turn, no system turn (BABILong's --use_chat_template)
    task.build_all_requests(rank=0, world_size=1, apply_chat_template=True,
                            chat_template=lambda messages, add_generation_prompt: json.dumps(messages))
    for inst in task.instances:
        want = get_formatted_input(inst.doc["input"], inst.doc["question"], prompts["examples"],
                                   prompts["instruction"], prompts["post_prompt"])
        assert json.loads(inst.arguments[0]) == [{"role": "user", "content": want}]


def test_the_default_prompt_is_still_lm_evals_and_a_misspelled_one_is_refused(folder):
    (inst,) = [i for i in _build(_task(folder)("qa1")) if i.doc["question"] == ROWS[1]["question"]]
    text, gen_kwargs = inst.arguments
    assert text.startswith("I will give you context") and "<context>" not in text and gen_kwargs["max_gen_toks"] == 16
    assert text.endswith(f"{ROWS[1]['input']}\n{ROWS[1]['question']}")
    with pytest.raises(TaskDataError, match=r"^babilong_prompt='babilon': expected lm_eval or babilong \(") as err:
        check_metadata_values({"babilong_prompt": "babilon"})  # longshort-eval: before the model loads
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="babilong_prompt='Babilong'; accepted: lm_eval or babilong"):
        _task(folder, babilong_prompt="Babilong")("qa1")  # stock lm-eval: when the task is built


def _build(task):
    task.build_all_requests(rank=0, world_size=1)
    return task.instances
