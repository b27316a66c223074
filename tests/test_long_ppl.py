"""longshort_ppl end to end through lm-eval's CLI (in-process), offline, on the tiny fixture model:
perplexity = exp(mean token NLL) of a direct transformers forward pass at each length, the per-position curve
averages back to it, bad input leaves the other tasks running, and lm-eval's own ``hf`` model agrees."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("lm_eval")

from pack_helpers import run_pack  # noqa: E402
from torchtune_longshort.eval.cli_run import run_cli, samples_of  # noqa: E402
from torchtune_longshort.eval.tasks.ppl.task import position_curve  # noqa: E402

META = '{"ppl_source": "stdlib", "ppl_num_samples": 3}'


def _ours(ckpt, tok, out, tasks, meta=META, extra=""):
    args = f"checkpoint_dir={ckpt},tokenizer={tok}" + extra
    return run_cli(
        ["run", "--model", "longshort", "--model_args", args, "--device", "cpu", "--batch_size", "2",
         "--tasks", tasks, "--metadata", meta,
         "--output_path", str(out), "--log_samples"]
    )


def _hf(ckpt, tok, out, tasks, meta=META):
    return run_cli(
        ["run", "--model", "hf", "--model_args", f"pretrained={ckpt},tokenizer={tok},dtype=float32",
         "--device", "cpu", "--batch_size", "2", "--tasks", tasks,
         "--metadata", meta, "--output_path", str(out)]
    )


@pytest.fixture(scope="module")
def ours(tiny_llama2_dir, sp_tokenizer_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("long_ppl_ours")
    meta = json.dumps({**json.loads(META), "max_seq_lengths": "128,256,512"})
    res = _ours(tiny_llama2_dir, sp_tokenizer_dir, out, "longshort_ppl", meta=meta)
    return out, res


@pytest.mark.slow
def test_ppl_equals_direct_forward_at_each_length(ours, tiny_llama2_dir, sp_tokenizer_dir):
    import sentencepiece as spm
    from transformers import LlamaForCausalLM

    out, res = ours
    results = res["results"]
    sp = spm.SentencePieceProcessor(model_file=str(sp_tokenizer_dir / "tokenizer.model"))
    hf = LlamaForCausalLM.from_pretrained(str(tiny_llama2_dir), dtype=torch.float32).eval()
    all_rows = samples_of(out, "longshort_ppl")
    for L in (128, 256):
        rows = [r for r in all_rows if r["doc"]["length"] == L]
        assert len(rows) == 3
        nll, n, lab = 0.0, 0, str(L)
        curves = []
        for r in rows:
            ids = sp.encode(r["doc"]["text"])
            assert len(ids) == L == r["doc"]["n_tokens"]
            with torch.no_grad():
                logits = hf(torch.tensor([[sp.bos_id()] + ids[:-1]])).logits[0].float()
            tok_nll = -F.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
            nll += float(tok_nll.double().sum())
            n += L
            curves.append(r[f"curve_mean_nll_{lab}"])
            assert torch.allclose(torch.tensor(r[f"curve_mean_nll_{lab}"]), tok_nll, atol=2e-5)
        res = results["longshort_ppl"]
        assert res[f"ppl_{lab},none"] == pytest.approx(math.exp(nll / n), rel=1e-5)
        assert res[f"token_nll_{lab},none"] == pytest.approx(nll / n, rel=1e-5)
        curve = position_curve(curves)
        assert len(curve) == L
        assert sum(curve) / L == pytest.approx(res[f"token_nll_{lab},none"], rel=1e-6)
        assert res[f"curve_mean_nll_{lab},none"] == pytest.approx(res[f"token_nll_{lab},none"], rel=1e-6)


@pytest.mark.slow
def test_length_past_the_model_is_nan_and_others_finish(ours):
    from torchtune_longshort.eval.report.results_io import not_scored_of

    _, res = ours
    results = res["results"]
    assert math.isnan(results["longshort_ppl"]["ppl_512,none"])
    # the reason is in the results file, outside lm-eval's metric table
    assert "error,none" not in results["longshort_ppl"]
    assert "needs 512 tokens" in not_scored_of(res)["longshort_ppl"]
    assert list(res["configs"]["longshort_ppl"]["not_scored"].values()) == [3]  # its 3 samples at 512, one reason
    assert math.isfinite(results["longshort_ppl"]["ppl_256,none"])


@pytest.mark.slow
def test_local_data_and_a_missing_file_of_another_task(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, caplog):
    """One run: longshort_ppl reads a local JSONL; passkey's data file holds no sample of its length -> NaN + message,
    longshort_ppl finishes. (A data file that is not there at all is refused before lm-eval starts:
    test_eval_pretrained.)"""
    from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents

    data = tmp_path / "docs.jsonl"
    docs = [d for d in iter_stdlib_documents(min_bytes=3000, include_tests=False, limit=40)][:4]
    data.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    missing = tmp_path / "nope.jsonl"
    missing.write_text(json.dumps({"length": 999, "prompt": "x", "target": "1"}) + "\n")  # no sample at 256
    meta = json.dumps({"ppl_data_files": str(data), "ppl_num_samples": 2, "passkey_data_files": str(missing),
                       "ppl_max_seq_lengths": [128], "passkey_max_seq_lengths": [256]})
    with caplog.at_level("ERROR"):
        res = _ours(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", "longshort_ppl,longshort_passkey", meta=meta)
    assert math.isnan(res["results"]["longshort_passkey"]["acc_256,none"])
    assert "nope.jsonl" in caplog.text and "holds no sample with length=256" in caplog.text
    assert math.isfinite(res["results"]["longshort_ppl"]["ppl_128,none"])
    rows = samples_of(tmp_path / "out", "longshort_ppl")
    assert rows[0]["doc"]["source"] == "local"
    assert all(any(r["doc"]["text"] in d for d in docs) for r in rows)


def test_dataset_and_scoring_without_the_cli(tiny_llama2_dir, sp_tokenizer_dir):
    """Fast path: the task's data + the adapter + the task's aggregation, against a direct forward pass."""
    from lm_eval.api.instance import Instance
    from transformers import LlamaForCausalLM

    from torchtune_longshort.eval.model.adapter import LongShortLM
    from torchtune_longshort.eval.tasks.ppl.task import agg_curve_mean_nll, agg_ppl, long_ppl_dataset, process_results

    docs = long_ppl_dataset(max_seq_lengths=[64], tokenizer=str(sp_tokenizer_dir), ppl_source="stdlib",
                            ppl_num_samples=2)["test"]
    assert all(d["n_tokens"] == 64 and not d["error"] for d in docs)
    lm = LongShortLM(checkpoint_dir=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu", batch_size=2)
    res = lm.loglikelihood([Instance("loglikelihood", d, ("", d["text"]), 0) for d in docs], disable_tqdm=True)
    items = [process_results(d, [r]) for d, r in zip(docs, res)]
    hf = LlamaForCausalLM.from_pretrained(str(tiny_llama2_dir), dtype=torch.float32).eval()
    nll = 0.0
    for d in docs:
        ids = lm.tok_encode(d["text"], add_special_tokens=False)
        with torch.no_grad():
            logits = hf(torch.tensor([[1] + ids[:-1]])).logits[0].float()
        nll += float(-F.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None]).double().sum())
    assert agg_ppl([i["ppl_64"] for i in items]) == pytest.approx(math.exp(nll / 128), rel=1e-5)
    assert agg_curve_mean_nll([i["curve_mean_nll_64"] for i in items]) == pytest.approx(nll / 128, rel=1e-5)


def test_ppl_pools_tokens_not_documents():
    """ppl = exp(sum NLL / sum tokens) (the module's formula): two samples of 10 and 30 tokens with mean NLL 1 and 3
    pool to 100 / 40 = 2.5 nats, where a mean over documents would give 2."""
    from torchtune_longshort.eval.tasks.ppl.task import agg_ppl, agg_token_nll

    items = [(10.0, 10), (90.0, 30)]
    assert agg_token_nll(items) == pytest.approx(2.5) and agg_ppl(items) == pytest.approx(math.exp(2.5))


def test_no_long_enough_text_gives_a_placeholder_with_the_reason(sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.tasks.ppl.task import long_ppl_dataset, process_results

    (tmp_path / "short.txt").write_text("tiny text")
    ds = long_ppl_dataset(max_seq_lengths="128", tokenizer=str(sp_tokenizer_dir),
                          ppl_data_files=str(tmp_path / "*.txt"))["test"]
    # the reason names the pre-filter that left no document (a 9-character text is never tokenized)
    assert len(ds) == 1 and "length=128" in ds[0]["error"] and "no document of 64 characters" in ds[0]["error"]
    assert math.isnan(process_results(ds[0], [(0.0, False)])["ppl_128"][0])


def test_lengths_come_from_metadata_task_key_first(sp_tokenizer_dir):
    from torchtune_longshort.eval.tasks.ppl.task import long_ppl_dataset

    kw = dict(tokenizer=str(sp_tokenizer_dir), ppl_source="stdlib", ppl_num_samples=1)
    ds = long_ppl_dataset(max_seq_lengths="2k", ppl_max_seq_lengths=[64, "128"], **kw)["test"]
    assert [d["length"] for d in ds] == [64, 128] and [d["n_tokens"] for d in ds] == [64, 128]
    with pytest.raises(ValueError, match="max_seq_lengths"):
        long_ppl_dataset(**kw)


@pytest.mark.slow
def test_hf_model_gives_the_same_ppl(ours, tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """Same perplexity; the per-position curve is listed for longshort (per-token values) and not at all for hf
    (one sum per request), never as a NaN."""
    results = ours[1]["results"]
    meta = json.dumps({**json.loads(META), "max_seq_lengths": "128,256"})
    theirs = _hf(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "hf", "longshort_ppl", meta=meta)["results"]
    for m in ("ppl_128,none", "ppl_256,none"):
        assert theirs["longshort_ppl"][m] == pytest.approx(results["longshort_ppl"][m], rel=1e-5)
    assert math.isfinite(results["longshort_ppl"]["curve_mean_nll_128,none"])
    assert not [k for k in theirs["longshort_ppl"] if k.startswith("curve_mean_nll")]


@pytest.mark.slow
def test_hf_model_agrees_with_linear_rope_scaling_from_config(sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    ckpt = write_random_llama2_checkpoint(
        tmp_path / "linear", vocab_size=512, embed_dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_dim=172, max_seq_len=256, seed=1, rope_scaling={"rope_type": "linear", "factor": 4.0},
    )
    meta = json.dumps({**json.loads(META), "max_seq_lengths": "128,256"})
    ours = _ours(ckpt, sp_tokenizer_dir, tmp_path / "o", "longshort_ppl", meta=meta)["results"]["longshort_ppl"]
    theirs = _hf(ckpt, sp_tokenizer_dir, tmp_path / "h", "longshort_ppl", meta=meta)["results"]["longshort_ppl"]
    for m in ("ppl_128,none", "ppl_256,none"):
        assert theirs[m] == pytest.approx(ours[m], rel=1e-5)
    # the scaling is really applied: the same weights with unscaled RoPE score differently
    from lm_eval.api.instance import Instance

    from torchtune_longshort.eval.model.adapter import LongShortLM

    req = [Instance("loglikelihood", {}, ("", "def f(x):\n    return x * 2\n" * 8), 0)]
    scaled = LongShortLM(checkpoint_dir=str(ckpt), tokenizer=str(sp_tokenizer_dir), device="cpu")
    plain = LongShortLM(checkpoint_dir=str(ckpt), tokenizer=str(sp_tokenizer_dir), device="cpu",
                        rope="linear", rope_factor=1.0)
    assert abs(scaled.loglikelihood(req, True)[0][0] - plain.loglikelihood(req, True)[0][0]) > 1e-2


def _text_lm_run(tok, lengths, **kw):
    """``longshort_ppl`` through lm-eval's evaluator on the stand-in model :class:`pack_helpers.TextLM`."""
    meta = {"tokenizer": str(tok), "ppl_source": "stdlib", "ppl_num_samples": 2, "max_seq_lengths": lengths}
    return run_pack("longshort_ppl", meta, **kw)


def test_a_request_cache_of_other_metadata_is_not_replayed(sp_tokenizer_dir, tmp_path, monkeypatch, caplog):
    """lm-eval's request cache is keyed without the task's --metadata: a cache written at length 64 was replayed at
    length 128 (the 64-token requests scored as 128-token samples). The pack's tasks build their requests again."""
    import lm_eval.caching.cache as cache

    monkeypatch.setattr(cache, "PATH", str(tmp_path / "cache"))
    _text_lm_run(sp_tokenizer_dir, "64", cache_requests=True)
    caplog.clear()
    with caplog.at_level("WARNING"):
        cached = _text_lm_run(sp_tokenizer_dir, "128", cache_requests=True)["results"]["longshort_ppl"]
    plain = _text_lm_run(sp_tokenizer_dir, "128")["results"]["longshort_ppl"]
    assert cached["ppl_128,none"] == plain["ppl_128,none"]
    assert caplog.text.count("--cache_requests: the pack's tasks do not use lm-eval's request cache") == 1


def test_few_shot_chat_template_and_system_instruction_leave_the_sequence_alone(sp_tokenizer_dir, caplog):
    """ppl is defined on exactly L tokens from BOS: --num_fewshot / --apply_chat_template / --system_instruction
    put another document or a system prompt before it (the score changed, reported as plain ppl_<L>). They are
    ignored, one warning each, and the task's config lists them."""
    plain = _text_lm_run(sp_tokenizer_dir, "64")
    with caplog.at_level("WARNING"):
        other = _text_lm_run(sp_tokenizer_dir, "64", num_fewshot=1, apply_chat_template=True,
                             system_instruction="Be brief.")
    assert other["results"]["longshort_ppl"]["ppl_64,none"] == plain["results"]["longshort_ppl"]["ppl_64,none"]
    for option in ("--num_fewshot", "--apply_chat_template", "--system_instruction"):
        assert caplog.text.count(f"longshort_ppl: {option} ignored") == 1
    assert other["configs"]["longshort_ppl"]["ignored_options"] == ["--num_fewshot", "--apply_chat_template",
                                                                    "--system_instruction"]
    assert other["n-shot"]["longshort_ppl"] == 0


def test_per_token_values_of_another_sequence_score_nan_with_the_reason():
    """The longshort model's per-token values tell how many tokens were scored: a count other than the sample's
    (a request built from another sample) was a silently dropped curve beside a wrong ppl; now NaN and why."""
    from torchtune_longshort.eval.model.scoring import TokenLoglikelihood
    from torchtune_longshort.eval.tasks.common.unavailable import ERROR_METRIC
    from torchtune_longshort.eval.tasks.ppl.task import process_results

    doc = {"length": 128, "n_tokens": 128, "error": ""}
    res = TokenLoglikelihood(-300.0, False, [-1.0] * 64)
    out = process_results(doc, [res])
    assert math.isnan(out["ppl_128"][0]) and "scored 64 tokens for a sample of 128" in out[ERROR_METRIC]
    assert "curve_mean_nll_128" not in out
    good = process_results(doc, [TokenLoglikelihood(-128.0, False, [-1.0] * 128)])
    assert good["ppl_128"] == (128.0, 128) and len(good["curve_mean_nll_128"]) == 128


@pytest.mark.parametrize("limit", [2, 0.5])
def test_limit_keeps_every_length(sp_tokenizer_dir, limit):
    """--limit 2 (or 0.5) of 2 lengths x 2 samples scored the first length alone (no ppl_128 row at all); the rows
    are interleaved across lengths, so each length keeps its share."""
    res = _text_lm_run(sp_tokenizer_dir, "64,128", limit=limit)
    rows = [r["doc"]["length"] for r in res["samples"]["longshort_ppl"]]
    assert sorted(rows) == [64, 128]
    assert {"ppl_64,none", "ppl_128,none"} <= set(res["results"]["longshort_ppl"])
