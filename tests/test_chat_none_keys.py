"""A message key whose value is None (``{"name": None}``, as OpenAI-style records carry) renders through the
chat template of a tokenizer folder of its own code (``FileTemplates``) as transformers' own ``apply_chat_template``
renders it for the same files with its tokenizer as transformers' own class (which drops such keys first)."""

from __future__ import annotations

import json
import shutil

from family_checkpoints import own_code_tokenizer

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}{% if 'name' in m %} name={{ m['name'] }}{% endif %}>"
            "{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


def test_none_valued_message_keys_render_as_transformers_renders_them(tmp_path):
    from transformers import AutoTokenizer

    from torchtune_longshort.eval.model.chat import render, template_tokenizer

    (tmp_path / "own").mkdir()
    own = own_code_tokenizer(tmp_path / "own", chat_template=TEMPLATE)
    reference = tmp_path / "reference"  # the same files, the tokenizer transformers' own class
    reference.mkdir()
    shutil.copy(own / "tokenizer.json", reference)
    config = json.loads((own / "tokenizer_config.json").read_text())
    del config["auto_map"]
    own_class = {**config, "tokenizer_class": "PreTrainedTokenizerFast"}
    (reference / "tokenizer_config.json").write_text(json.dumps(own_class))
    hf = AutoTokenizer.from_pretrained(str(reference))
    history = [{"role": "user", "content": "2+2?", "name": None}, {"role": "assistant", "content": "4", "name": "bot"},
               {"role": "user", "content": "and 3+3?", "name": None}]
    expected = hf.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
    assert render(template_tokenizer(own), history, True, TEMPLATE) == expected
