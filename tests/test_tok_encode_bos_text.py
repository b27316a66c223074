"""``LongShortLM.tok_encode`` against lm-eval's own ``HFLM.tok_encode`` (run on transformers' tokenizer of the same
folder): a string that already starts with the BOS text (a Llama-2 chat template renders ``<s>[INST]``) gets no
second BOS, as ``hf`` rules (``has_bos_prefix``). Dropping that check in the adapter passed every test: the
adapter's tests encode plain text."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("lm_eval")

from lm_eval.models.huggingface import HFLM  # noqa: E402

from torchtune_longshort.eval.model.adapter import LongShortLM  # noqa: E402
from torchtune_longshort.models.tokenizer_formats import load_tokenizer  # noqa: E402

STRINGS = ["<s>def f():", "<s> x = 1", "def f():", "</s>abc"]


def test_a_string_starting_with_bos_text_is_encoded_as_hf_encodes_it(sp_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = load_tokenizer(sp_tokenizer_dir)
    ours = SimpleNamespace(tokenizer=tok, args=SimpleNamespace(add_bos_token=None), prefix_token_id=tok.bos_id)
    hf_tok = AutoTokenizer.from_pretrained(str(sp_tokenizer_dir), local_files_only=True)
    hf = SimpleNamespace(tokenizer=hf_tok, add_bos_token=None, prefix_token_id=hf_tok.bos_token_id)
    for s in STRINGS:
        for special in (None, False):
            assert LongShortLM.tok_encode(ours, s, special) == HFLM.tok_encode(hf, s, special), (s, special)
    assert LongShortLM.tok_encode(ours, STRINGS[0]).count(tok.bos_id) == 1
