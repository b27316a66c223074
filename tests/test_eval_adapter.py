"""The ``longshort`` lm-eval model against independent references: transformers' forward pass of the same
checkpoint (log-likelihoods, batched and not, truncation) and greedy decoding by full forward passes (KV cache)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from torchtune_longshort.eval.model.adapter import LongShortLM  # noqa: E402
from torchtune_longshort.eval.model.limits import truncate_tokens  # noqa: E402

TEXTS = [
    ("def add(a, b):", " return a + b"),
    ("import os\nimport sys", "\nimport re\nimport json\n"),
    ("", "class Foo:\n    pass"),
    ("The grass is green.", " The sky is blue. The sun is yellow."),
]


@pytest.fixture(scope="module")
def hf_model(tiny_llama2_dir):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(str(tiny_llama2_dir), dtype=torch.float32).eval()


def _lm(tiny_llama2_dir, sp_tokenizer_dir, **kw):
    return LongShortLM(checkpoint_dir=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu", **kw)


def _ref_loglik(hf_model, ids, n_cont):
    with torch.no_grad():
        logits = hf_model(torch.tensor([ids[:-1]])).logits[0].float()
    lp = F.log_softmax(logits, dim=-1)[-n_cont:]
    target = torch.tensor(ids[-n_cont:])
    tok = lp.gather(1, target[:, None])[:, 0]
    return float(tok.double().sum()), bool((lp.argmax(-1) == target).all()), tok


def _reqs():
    return [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(TEXTS)]


@pytest.mark.parametrize("batch_size", [1, 3])
def test_loglikelihood_equals_transformers_forward(tiny_llama2_dir, sp_tokenizer_dir, hf_model, batch_size):
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size=batch_size)
    got = lm.loglikelihood(_reqs(), disable_tqdm=True)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_tokenizer_dir / "tokenizer.model"))
    for (ctx, cont), res in zip(TEXTS, got):
        if ctx:
            whole = [sp.bos_id()] + sp.encode(ctx + cont)
            n_cont = len(whole) - 1 - len(sp.encode(ctx))
        else:
            whole = [sp.bos_id()] + sp.encode(cont)
            n_cont = len(whole) - 1
        ref, greedy, tok = _ref_loglik(hf_model, whole, n_cont)
        assert res[0] == pytest.approx(ref, abs=2e-4)
        assert res[1] == greedy
        assert torch.allclose(torch.tensor(res.token_logprobs), tok, atol=2e-5)


def test_rolling_loglikelihood_matches_window_sum(tiny_llama2_dir, sp_tokenizer_dir, hf_model):
    # max_length 48 forces several rolling windows; each is scored like lm-eval's hf model does.
    import lm_eval.utils as u

    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=48, batch_size=2)
    text = "for i in range(10):\n    print(i * i)\n" * 6
    (got,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)], disable_tqdm=True)
    ids = lm.tok_encode(text)
    ref = 0.0
    for ctx, pred in map(u.make_disjoint_window, u.get_rolling_token_windows(ids, 1, 48, 1)):
        ref += _ref_loglik(hf_model, ctx + pred, len(pred))[0]
    assert len(ids) > 96 and got == pytest.approx(ref, abs=5e-4)


def test_only_rank_0_shows_progress_bars(tiny_llama2_dir, sp_tokenizer_dir, capsys):
    # as lm-eval's hf model: under torchrun every process drew its bars, each console line twice
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir)
    req = [Instance("loglikelihood_rolling", {}, ("def f():\n    return 1\n",), 0)]
    gen = [Instance("generate_until", {}, ("def f():", {"until": ["\n"], "max_gen_toks": 2}), 0)]
    shown = []
    for rank in (0, 1):
        lm._rank = rank
        lm.loglikelihood_rolling(req)
        lm.generate_until(gen)
        shown.append(capsys.readouterr().err)
    assert "longshort loglikelihood" in shown[0] and "longshort generate_until" in shown[0], shown[0]
    assert "longshort" not in shown[1], shown[1]


def test_kv_cache_generation_equals_full_forward_greedy(tiny_llama2_dir, sp_tokenizer_dir, hf_model):
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size=3)
    prompts = [lm.tok_encode(t) for t in ("def f(x):", "import collections\nimport itertools\n", "class")]
    got = lm.greedy_generate(prompts, max_new_tokens=12)
    for p, g in zip(prompts, got):
        ids = list(p)
        ref = []
        for _ in range(12):
            with torch.no_grad():
                nxt = int(hf_model(torch.tensor([ids])).logits[0, -1].argmax())
            if nxt == lm.eot_token_id:
                break
            ref.append(nxt)
            ids.append(nxt)
        assert g == ref
    # batched with left padding == one prompt at a time
    assert [lm.greedy_generate([p], 12)[0] for p in prompts] == got


def test_generate_until_stops_at_until(tiny_llama2_dir, sp_tokenizer_dir):
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir)
    full = lm.generate_until([Instance("generate_until", {}, ("def f(x):", {"max_gen_toks": 20}), 0)], True)[0]
    assert len(full) > 2
    stop = full[1:3]
    cut = lm.generate_until([Instance("generate_until", {}, ("def f(x):", {"until": [stop], "max_gen_toks": 20}), 0)], True)
    assert cut[0] == full.split(stop)[0]
    # a task's own num_beams (hf's generate runs beam search) was dropped: the greedy text scored without a word
    with pytest.raises(ValueError, match=r"num_beams=3: the longshort model decodes plain greedy"):
        lm.generate_until([Instance("generate_until", {}, ("def f(x):", {"num_beams": 3, "max_gen_toks": 4}), 0)], True)
    for sampled in ({"do_sample": True}, {"temperature": 0.7}):  # a task's own sampling: refused at its request
        with pytest.raises(ValueError, match=r"the longshort model decodes greedily only"):
            lm.generate_until([Instance("generate_until", {}, ("def f(x):", {**sampled, "max_gen_toks": 4}), 0)], True)
    neutral = {"num_beams": 1, "top_k": 5, "max_gen_toks": 20}
    assert lm.generate_until([Instance("generate_until", {}, ("def f(x):", neutral), 0)], True) == [full]


def test_middle_truncation_keeps_first_and_last_halves(tiny_llama2_dir, sp_tokenizer_dir, hf_model):
    assert truncate_tokens(list(range(10)), 4, "middle") == [0, 1, 8, 9]
    assert truncate_tokens(list(range(10)), 5, "middle") == [0, 1, 7, 8, 9]
    assert truncate_tokens(list(range(10)), 4, "left") == [6, 7, 8, 9]
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=32, truncation="middle")
    ctx, cont = "import os\n" * 20, " import re"
    (res,) = lm.loglikelihood([Instance("loglikelihood", {}, (ctx, cont), 0)], disable_tqdm=True)
    ctx_enc, cont_enc = lm._encode_pair(ctx, cont)
    kept = truncate_tokens(ctx_enc, 33 - len(cont_enc), "middle") + cont_enc
    assert kept[0] == lm.prefix_token_id  # the BOS (head) survives, unlike left truncation
    assert res[0] == pytest.approx(_ref_loglik(hf_model, kept, len(cont_enc))[0], abs=2e-4)


def test_next_token_logprobs_are_full_distributions(tiny_llama2_dir, sp_tokenizer_dir, hf_model):
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir)
    ids = lm.tok_encode("while True:\n    break", add_special_tokens=False)
    lp = lm.next_token_logprobs(ids)
    with torch.no_grad():
        ref = F.log_softmax(hf_model(torch.tensor([ids])).logits[0].float(), -1)
    assert lp.shape == (len(ids), 512) and lp.dtype == torch.float32
    assert torch.allclose(lp, ref, atol=2e-5)


def test_refuses_requests_past_covered_positions_but_scores_the_rest(tiny_llama2_dir, sp_tokenizer_dir, caplog):
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=600)  # checkpoint covers 256 positions, no scaling
    long_text = "x = 1\n" * 60
    reqs = [
        Instance("loglikelihood", {}, ("", long_text), 0, metadata=("too_long", 0, 1)),
        Instance("loglikelihood", {}, TEXTS[0], 1, metadata=("fine", 0, 1)),
    ]
    with caplog.at_level("ERROR"):
        out = lm.loglikelihood(reqs, disable_tqdm=True)
    assert 256 < len(lm.tok_encode(long_text)) < 600
    assert math.isnan(out[0][0]) and math.isfinite(out[1][0])
    assert "too_long" in caplog.text and "allow_extrapolation" in caplog.text and "256" in caplog.text
    lm2 = _lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=600, allow_extrapolation=True)
    assert math.isfinite(lm2.loglikelihood(reqs[:1], disable_tqdm=True)[0][0])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_size": "auto:0"}, r"batch_size='auto:0' is not accepted: auto, auto:N with N a positive integer"),
        ({"batch_size": "auto:x"}, r"batch_size='auto:x' is not accepted"),
        ({"batch_size": "auto", "max_batch_size": 0}, r"max_batch_size=0 must be a positive integer"),
        ({"truncation": "right"}, "truncation"),
        ({"dtype": "float64"}, "dtype"),
        ({"max_length": 0}, "max_length"),
        ({"bogus": 1}, r"unknown model_args \['bogus'\]; accepted"),
        ({"max_lenght": 256}, r"unknown model_args \['max_lenght'\] \(did you mean 'max_length'\?\)"),
        ({"rope_factor": 2}, "rope="),
        ({"cpu_keep_freed_blocks": "maybe"}, "cpu_keep_freed_blocks"),
    ],
)
def test_bad_model_args_fail_early(tiny_llama2_dir, sp_tokenizer_dir, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _lm(tiny_llama2_dir, sp_tokenizer_dir, **kwargs)


def test_missing_tokenizer_is_named(tiny_llama2_dir):
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        LongShortLM(checkpoint_dir=str(tiny_llama2_dir), device="cpu")


def test_loglikelihood_is_computed_chunk_by_chunk(tiny_llama2_dir, sp_tokenizer_dir, hf_model, monkeypatch):
    """With 5-position output chunks, no [positions, vocab] tensor larger than one chunk ever exists, and the
    log-likelihoods, per-token values and greedy flags still equal transformers' full forward."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    import torchtune_longshort.hidden_states as hidden_states

    rows = 5
    monkeypatch.setattr(hidden_states, "OUTPUT_CHUNK_ELEMENTS", rows * 512)
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size=2)
    assert hidden_states.output_rows(lm.vocab_size) == rows

    class LargestVocabTensor(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
            for t in tree_leaves(out):
                # new [.., vocab] memory only (views such as the transposed output weight share an input's storage)
                if (isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == 512
                        and t.untyped_storage().data_ptr() not in inputs):
                    LargestVocabTensor.largest = max(LargestVocabTensor.largest, t.numel() // 512)
            return out

    text = "def main():\n    for i in range(3):\n        print(i)\n" * 3
    reqs = _reqs() + [Instance("loglikelihood", {}, ("", text), 9)]
    with LargestVocabTensor():
        got = lm.loglikelihood(reqs, disable_tqdm=True)
    assert LargestVocabTensor.largest == rows
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_tokenizer_dir / "tokenizer.model"))
    whole = [sp.bos_id()] + sp.encode(text)
    assert len(whole) - 1 > 6 * rows
    ref, greedy, tok = _ref_loglik(hf_model, whole, len(whole) - 1)
    assert got[-1][0] == pytest.approx(ref, rel=1e-5)
    assert got[-1][1] == greedy
    assert torch.allclose(torch.tensor(got[-1].token_logprobs), tok, atol=2e-5)
    # a request whose continuation's argmax is its target everywhere: built from the model's own greedy output
    ids = lm.tok_encode("def f(x):")
    cont = lm.greedy_generate([ids], max_new_tokens=2 * rows + 1)[0]
    (res,) = lm._loglikelihood_tokens([(None, ids, cont)], disable_tqdm=True)
    assert len(cont) == 2 * rows + 1 and res[1] is True
    # the misalignment requests project only the last position of each suffix
    LargestVocabTensor.largest = 0
    with LargestVocabTensor():
        (div,) = lm.next_token_divergence([Instance("next_token_divergence", {}, (text, {"l1": 20, "l2": 30}), 0)],
                                          disable_tqdm=True)
    assert LargestVocabTensor.largest == 1 and div["sce"] > 0
