"""The ``longshort`` model's chat prompts against lm-eval's own ``HFLM.apply_chat_template`` on transformers' tokenizer
of the same folder: a ``--system_instruction`` turn, ``--fewshot_as_multiturn`` turns, a task's ``gen_prefix`` (the
last turn the assistant's, continued: ``add_generation_prompt=False``), and a template that refuses the system role
(hf renders the history again without it)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

pytest.importorskip("lm_eval")

from test_eval_adapter import _lm  # noqa: E402

# refuses a system turn, as Gemma's and Mistral's templates do (transformers' raise_exception: a TemplateError)
NO_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
             "[{{ m['role'] }}]{{ m['content'] }}[/{{ m['role'] }}]{% endfor %}"
             "{% if add_generation_prompt %}[assistant]{% endif %}")
WITH_SYSTEM = NO_SYSTEM.replace("{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}",
                                "")
# what lm-eval builds: --system_instruction first, --fewshot_as_multiturn's question/answer turns, then the question
HISTORY = [{"role": "system", "content": "Answer with a number."},
           {"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"},
           {"role": "user", "content": "2+2?"}]
GEN_PREFIX = HISTORY + [{"role": "assistant", "content": "The answer is"}]


@pytest.mark.parametrize("template", [WITH_SYSTEM, NO_SYSTEM], ids=["system", "no_system"])
def test_chat_prompts_are_hflm_apply_chat_template_of_the_same_folder(tiny_llama2_dir, sp_tokenizer_dir, tmp_path,
                                                                      template):
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoTokenizer

    tok = tmp_path / "tok"
    shutil.copytree(sp_tokenizer_dir, tok)
    (tok / "chat_template.jinja").write_text(template)
    hf = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(str(tok)), chat_template_args={})
    lm = _lm(tiny_llama2_dir, tok)
    assert lm.chat_template(True) == template
    for history, prompt in ((HISTORY, True), (GEN_PREFIX, False)):
        expected = HFLM.apply_chat_template(hf, history, add_generation_prompt=prompt)
        assert lm.apply_chat_template(history, add_generation_prompt=prompt) == expected
    assert lm.apply_chat_template(HISTORY) == HFLM.apply_chat_template(hf, HISTORY)  # lm-eval's default: a prompt
    # the references themselves: the system turn kept only where the template takes it; the prefix continued
    assert ("Answer with a number." in HFLM.apply_chat_template(hf, HISTORY)) == (template == WITH_SYSTEM)
    assert HFLM.apply_chat_template(hf, GEN_PREFIX, add_generation_prompt=False).endswith("The answer is")
