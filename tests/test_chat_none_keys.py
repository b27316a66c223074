"""A message key whose value is None (``{"name": None}``, as OpenAI-style records carry) renders through the
chat template of a tokenizer folder of its own code (``FileTemplates``) as transformers' own ``apply_chat_template``
renders it for the same files with its tokenizer as transformers' own class (which drops such keys first)."""

from __future__ import annotations

from family_checkpoints import as_transformers_class, own_code_tokenizer

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}{% if 'name' in m %} name={{ m['name'] }}{% endif %}>"
            "{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


def test_none_valued_message_keys_render_as_transformers_renders_them(tmp_path):
    from transformers import AutoTokenizer

    from torchtune_longshort.eval.model.chat import render, template_tokenizer

    (tmp_path / "own").mkdir()
    own = own_code_tokenizer(tmp_path / "own", chat_template=TEMPLATE)
    hf = AutoTokenizer.from_pretrained(str(as_transformers_class(own, tmp_path / "reference")))
    history = [{"role": "user", "content": "2+2?", "name": None}, {"role": "assistant", "content": "4", "name": "bot"},
               {"role": "user", "content": "and 3+3?", "name": None}]
    expected = hf.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
    assert render(template_tokenizer(own), history, True, TEMPLATE) == expected
