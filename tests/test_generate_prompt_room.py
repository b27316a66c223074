"""A ``generate_until`` prompt longer than ``max_length - max_gen_toks`` tokens, cut from the left
(``truncation=left``), keeps the last ``max_length - max_gen_toks`` tokens: the prompt lm-eval's own ``HFLM``
hands its model for the same request on transformers' model of the same tiny folder (its ``max_ctx_len``), so the
generated tokens fit in ``max_length``."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

MAX_LENGTH, MAX_GEN = 64, 8


def test_a_left_cut_generation_prompt_leaves_room_for_max_gen_toks_as_hflm_does(tiny_llama2_dir, sp_tokenizer_dir,
                                                                                 monkeypatch):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from torchtune_longshort.eval.model import generate_requests
    from torchtune_longshort.eval.model.adapter import LongShortLM

    prompt = "for i in range(10):\n    x = i * 2\n" * 12
    kwargs = {"until": ["\n\n\n"], "max_gen_toks": MAX_GEN, "do_sample": False}
    seen = {}
    hf = HFLM(pretrained=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu", max_length=MAX_LENGTH,
              batch_size=1)
    real = hf._model_generate
    monkeypatch.setattr(hf, "_model_generate", lambda context, **kw: seen.setdefault("hf", context[0].tolist())
                        and real(context, **kw))
    hf.generate_until([Instance("generate_until", {}, (prompt, kwargs), 0)], disable_tqdm=True)

    lm = LongShortLM(checkpoint_dir=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu",
                     max_length=MAX_LENGTH, truncation="left")
    run = generate_requests.greedy_generate
    monkeypatch.setattr(generate_requests, "greedy_generate",
                        lambda model, prompts, *a, **kw: seen.setdefault("longshort", prompts[0]) and
                        run(model, prompts, *a, **kw))
    lm.generate_until([Instance("generate_until", {}, (prompt, kwargs), 0)], disable_tqdm=True)
    assert len(lm.tok_encode(prompt)) > MAX_LENGTH  # the prompt is cut
    assert seen["longshort"] == seen["hf"]
