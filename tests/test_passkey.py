"""Passkey generator (key present once, length within budget, depth measured in tokens) and the task end to end
through lm-eval's CLI, with lm-eval's ``hf`` model giving the same generations on the same checkpoint."""

from __future__ import annotations

import math
import re

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer  # noqa: E402
from torchtune_longshort.eval.tasks.passkey.task import (  # noqa: E402
    GEN_BUDGET,
    QUESTION,
    haystack_units,
    make_passkey_samples,
    needle,
    passkey_dataset,
    process_results,
    write_passkey_jsonl,
)


@pytest.mark.parametrize("length", [256, 1024])
def test_generator_length_depth_and_answer(sp_tokenizer_dir, length):
    tok = TaskTokenizer(str(sp_tokenizer_dir))
    units = haystack_units()
    unit_tokens = max(len(tok.encode(u)) + 1 for u in units[:5])
    samples = make_passkey_samples(tok, length, depths=(0, 25, 50, 75, 100), num_samples=2, units=units)
    assert len(samples) == 10
    for s in samples:
        assert s.input.count(needle(int(s.answer))) == 1 and s.input.endswith(QUESTION)
        n = 1 + len(tok.encode(s.input))
        assert n == s.n_tokens and length - GEN_BUDGET - unit_tokens <= n <= length - GEN_BUDGET
        # depth in tokens: needle start relative to the haystack, within one unit of the request
        head = s.input.split(needle(int(s.answer)))[0]
        hay_tokens = n - len(tok.encode(needle(int(s.answer)))) - len(tok.encode(QUESTION)) - 40
        assert abs(s.depth_actual - s.depth) <= 100 * unit_tokens / hay_tokens + 1, (s.depth, s.depth_actual)
        assert head  # the task description always precedes the haystack


def test_a_length_too_short_for_the_prompt_names_the_shortest(sp_tokenizer_dir):
    # it said "already has 151 tokens (> -14 = length - 16)"
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError
    from torchtune_longshort.eval.tasks.passkey.task import make_passkey_sample

    tok, units = TaskTokenizer(str(sp_tokenizer_dir)), haystack_units()
    with pytest.raises(TaskDataError) as e:
        make_passkey_sample(tok, 2, 50, 12345, units)
    shortest = int(re.search(r"passkey lengths start at (\d+) tokens with this tokenizer", str(e.value)).group(1))
    assert "-" not in str(e.value).split("tokens")[0]
    make_passkey_sample(tok, shortest, 50, 12345, units)  # the length it names fits
    with pytest.raises(TaskDataError):
        make_passkey_sample(tok, shortest - 1, 50, 12345, units)


def test_scoring_takes_the_first_number():
    doc = {"answer": "12345", "depth": 50, "length": 2048, "error": ""}
    assert process_results(doc, [" 12345. Remember"]) == {"acc": 1.0, "acc_2k": 1.0, "acc_d50": 1.0, "acc_2k_d50": 1.0,
                                                          "digits": 1.0, "digits_2k": 1.0, "digits_d50": 1.0,
                                                          "digits_2k_d50": 1.0}
    assert process_results(doc, [" 1234 5"])["acc"] == 0.0
    assert process_results(doc, [""])["acc"] == 0.0
    # digits: the first number's digits at the key's places (what a partly learned copy gets right)
    assert process_results(doc, [" 12945."])["digits"] == 0.8 and process_results(doc, [" 12945."])["acc"] == 0.0
    assert process_results(doc, [" 1234 5"])["digits_2k_d50"] == 0.8  # "1234": four places right of five
    assert process_results(doc, [" 54321"])["digits"] == 0.2 and process_results(doc, ["blue."])["digits"] == 0.0
    # a longer number is not the key (it has all five of the key's digits at their places); a shifted one has none
    assert process_results(doc, [" 123456"])["acc"] == 0.0 and process_results(doc, [" 123456"])["digits"] == 1.0
    assert process_results(doc, [" 012345"])["acc"] == 0.0 and process_results(doc, [" 012345"])["digits"] == 0.0


class _WordTokenizer:
    """One token per whitespace-separated word: every count of the generator is then known in closed form."""

    def encode(self, text):
        return text.split()


@pytest.mark.parametrize("depth", [25, 75])
@pytest.mark.parametrize("length", [300, 301, 302, 303])
def test_generator_fills_the_budget_exactly_and_puts_the_needle_after_round_depth_units(length, depth):
    from torchtune_longshort.eval.tasks.passkey.task import TASK_DESCRIPTION, make_passkey_sample

    units = [f"u{i}." for i in range(2000)]  # one token each
    s = make_passkey_sample(_WordTokenizer(), length, depth, 12345, units)
    assert s.n_tokens == 1 + len(s.input.split()) == length - GEN_BUDGET  # BOS + prompt: the whole budget, no less
    words = s.input.split()
    n = sum(w.startswith("u") for w in words)
    k = words.index("pass") - 1 - len(TASK_DESCRIPTION.split())  # units before "The pass key is ..."
    assert k == round(depth / 100 * n)  # the four lengths give n of every residue mod 4: .25, .5 and .75 fractions
    assert s.depth_actual == round(100 * k / n, 2)


def test_local_jsonl_round_trip_and_missing_file(sp_tokenizer_dir, tmp_path):
    tok = TaskTokenizer(str(sp_tokenizer_dir))
    path = write_passkey_jsonl(make_passkey_samples(tok, 256, depths=(50,), num_samples=2), tmp_path / "p.jsonl")
    ds = passkey_dataset(max_seq_lengths="256", passkey_data_files=str(path))["test"]
    assert len(ds) == 2 and all(r["depth"] == 50 and not r["error"] for r in ds)
    bad = passkey_dataset(max_seq_lengths=[256], passkey_data_files=str(tmp_path / "missing.jsonl"))["test"]
    assert len(bad) == 1 and "missing.jsonl" in bad[0]["error"]
    # one length without data is a placeholder with its reason; the other length keeps its rows
    both = passkey_dataset(passkey_max_seq_lengths="256,512", passkey_data_files=str(path))["test"]
    # (rows interleaved across lengths and depths: the first of each cell, then the second, ...)
    assert [r["length"] for r in both] == [256, 512, 256] and "length=512" in both[1]["error"]
    placeholder = process_results(both[1], [" 1"])
    assert math.isnan(placeholder["acc_512"]) and math.isnan(placeholder["digits_512"]) and "digits" not in placeholder


@pytest.mark.slow
def test_passkey_end_to_end_and_hf_parity(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.cli_run import run_cli, samples_of

    common = ["--device", "cpu", "--batch_size", "4", "--tasks",
              "longshort_passkey", "--metadata", '{"passkey_num_samples": 2, "max_seq_lengths": [256]}',
              "--log_samples"]
    ours = run_cli(["run", "--model", "longshort", "--model_args",
                    f"checkpoint_dir={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}",
                    "--output_path", str(tmp_path / "o"), *common])["results"]["longshort_passkey"]
    theirs = run_cli(["run", "--model", "hf", "--model_args",
                      f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},dtype=float32",
                      "--output_path", str(tmp_path / "h"), *common])["results"]["longshort_passkey"]
    assert {"acc_256,none", "acc_d0,none", "acc_256_d100,none"} <= set(ours)
    for k in ("acc,none", "acc_256,none", "acc_d0,none", "acc_256_d0,none", "acc_256_d100,none"):
        assert ours[k] == theirs[k]
    a = {r["doc_id"]: r["filtered_resps"][0] for r in samples_of(tmp_path / "o", "longshort_passkey")}
    b = {r["doc_id"]: r["filtered_resps"][0] for r in samples_of(tmp_path / "h", "longshort_passkey")}
    assert len(a) == 10
    # same greedy tokens; byte-fallback pieces of a random model may decode differently, digits do not
    assert {k: re.findall(r"\d+", v) for k, v in a.items()} == {k: re.findall(r"\d+", v) for k, v in b.items()}


def _prompts(result):
    return {r["doc_id"]: r["arguments"][0][0] for r in result["samples"]["longshort_passkey"]}


def test_few_shot_is_ignored_a_chat_template_kept_and_seed_named(sp_tokenizer_dir, monkeypatch, caplog):
    """A passkey prompt is sized to its length L: --num_fewshot would put another whole haystack (and its key)
    before it, so it is ignored with one warning; a chat template is the model's prompt format and stays. lm-eval's
    --seed changes none of the pack's data (the keys come from passkey_seed): one line says so."""
    from pack_helpers import run_pack

    meta = {"tokenizer": str(sp_tokenizer_dir), "max_seq_lengths": "256", "passkey_num_samples": 1,
            "passkey_depths": [0, 100]}
    plain = _prompts(run_pack("longshort_passkey", meta))
    monkeypatch.setattr("sys.argv", ["lm_eval", "--tasks", "longshort_passkey", "--seed", "7"])
    with caplog.at_level("WARNING"):
        few = run_pack("longshort_passkey", meta, num_fewshot=1, apply_chat_template=True)
    prompts = _prompts(few)  # the chat template's system prompt, then the plain prompt: no example before it
    assert all(prompts[i] == "<system>You are helpful.</system>" + plain[i] for i in plain)
    assert few["n-shot"]["longshort_passkey"] == 0
    assert caplog.text.count("longshort_passkey: --num_fewshot ignored") == 1
    assert "--apply_chat_template" not in caplog.text
    assert caplog.text.count("--seed does not change the pack's data") == 1 and "passkey_seed" in caplog.text


@pytest.mark.parametrize("limit, cells", [
    (2, {(256, 0), (512, 0)}),                          # before: (256, 0) twice, no 512 at all
    (4, {(256, 0), (512, 0), (256, 100), (512, 100)}),  # every cell
    (0.5, {(256, 0), (512, 0), (256, 100), (512, 100)}),
])
def test_limit_spreads_over_lengths_and_depths(sp_tokenizer_dir, limit, cells):
    """lm-eval's --limit takes a task's first rows: the sweep's rows are interleaved across (length, depth), so a
    limit keeps every length (and, when it allows, every cell) instead of the first ones whole."""
    from pack_helpers import run_pack

    meta = {"tokenizer": str(sp_tokenizer_dir), "max_seq_lengths": "256,512", "passkey_num_samples": 2,
            "passkey_depths": [0, 100]}
    res = run_pack("longshort_passkey", meta, limit=limit)
    got = [(r["doc"]["length"], r["doc"]["depth"]) for r in res["samples"]["longshort_passkey"]]
    assert set(got) == cells and len(got) == (limit if limit >= 1 else 8 * limit)
    assert {f"acc_{L}_d{d},none" for L, d in cells} <= set(res["results"]["longshort_passkey"])


def test_unscored_lengths_leave_the_pooled_metrics_to_the_scored_ones(sp_tokenizer_dir):
    """A length whose prompt cannot fit (64: placeholder) and one the model cannot run (1k past a 600-position
    model: every row refused) are NaN at their length and left out of ``acc`` / ``acc_d<depth>``, which average the
    scored lengths (before: ``acc`` was NaN while ``acc_d0`` averaged the rest); the results file names them."""
    from pack_helpers import TextLM, run_pack

    class KeyAtShortLM(TextLM):  # the key, read from the prompt, for prompts under 550 characters (256): else wrong
        def generate_until(self, requests, disable_tqdm: bool = False):
            keys = [re.search(r"The pass key is (\d+)", r.args[0]).group(1) for r in requests]
            return [f" {k}." if len(r.args[0]) < 550 else " 11111." for k, r in zip(keys, requests)]

    meta = {"tokenizer": str(sp_tokenizer_dir), "max_seq_lengths": "64,256,512,1024", "passkey_num_samples": 2,
            "passkey_depths": [0, 100], "lm_eval_model": "hf", "max_length": 600}
    res = run_pack("longshort_passkey", meta, model=KeyAtShortLM())
    got = {k.split(",")[0]: v for k, v in res["results"]["longshort_passkey"].items() if k.endswith(",none")}
    assert got["acc_256"] == 1.0 and got["acc_512"] == 0.0
    assert math.isnan(got["acc_64"]) and math.isnan(got["acc_1k"]) and math.isnan(got["acc_1k_d0"])
    # the placeholder's length says NaN in each of its depth cells too (it had none: its heatmap column was gone)
    assert all(math.isnan(got[f"{m}_64_d{d}"]) for m in ("acc", "digits") for d in (0, 100))
    # the reference: the mean of the scored lengths' accuracies (equal samples per length), at each depth too
    assert got["acc"] == (got["acc_256"] + got["acc_512"]) / 2 == 0.5
    assert got["acc_d0"] == (got["acc_256_d0"] + got["acc_512_d0"]) / 2 == got["acc"]
    assert got["digits"] == pytest.approx((got["digits_256"] + got["digits_512"]) / 2)
    assert res["configs"]["longshort_passkey"]["not_scored_lengths"] == {"64": 2, "1k": 4}  # one per depth cell


def test_an_unscored_sample_reports_only_its_length():
    doc = {"answer": "12345", "depth": 50, "length": 2048, "error": "too long"}
    out = process_results(doc, [" 12345"])
    assert set(out) == {"acc_2k", "acc_2k_d50", "digits_2k", "digits_2k_d50", "error"}
    assert all(math.isnan(v) for k, v in out.items() if k != "error")
