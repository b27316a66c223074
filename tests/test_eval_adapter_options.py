"""The ``longshort`` lm-eval model's options as lm-eval's hf takes them: gen_kwargs do_sample refused before
lm-eval starts (command line and config file), use_cache not replaying a refusal after the fix, batch_size=auto
scoring as batch size 1 and halving a batch out of memory, dtype. Split from test_eval_adapter.py."""

from __future__ import annotations

import math

import pytest
import yaml
import torch

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from test_eval_adapter import TEXTS, _lm  # noqa: E402


def test_gen_kwargs_do_sample_is_refused_before_lm_eval_starts(tiny_llama2_dir, sp_tokenizer_dir):
    """``--gen_kwargs do_sample=True`` with ``--model longshort`` (greedy only) was refused at the first generation,
    after the model loaded and any earlier task ran (exit 2, no results file); now before lm-eval starts, unless no
    task of the run generates (``longshort_ppl``: lm-eval gives it no generation kwargs)."""
    import re
    from pathlib import Path

    import lm_eval.tasks
    from lm_eval.api.task import TaskConfig

    from torchtune_longshort.eval.cli_run import check_arguments
    from torchtune_longshort.eval.tasks import TASK_FAMILIES, generates, tasks_path

    def kinds(path):  # output_type of a task file, its includes, or the lm-eval task file it starts from
        text = path.read_text()
        own = re.findall(r"^output_type: (\w+)", text, re.M)
        more = [path.parent / i for i in re.findall(r"^include: (\S+)", text, re.M)]
        more += [Path(lm_eval.tasks.__file__).parent / b for b in re.findall(r"^lm_eval_base: (\S+)", text, re.M)]
        return own or [k for f in more for k in kinds(f)]

    for fam in TASK_FAMILIES.values():  # the registry against the YAMLs lm-eval reads
        files = list((tasks_path() / fam.folder).glob("*.yaml"))
        own_class = any("MisalignmentTask" in f.read_text() for f in files)  # its own request type
        found = {k for f in files for k in kinds(f)} or ({"own"} if own_class else {TaskConfig().output_type})
        assert fam.generates == ("generate_until" in found), (fam.task, found)
    margs = f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}"
    argv = ["run", "--model", "longshort", "--model_args", margs,
            "--tasks", "longshort_passkey", "--device", "cpu", "--gen_kwargs", "do_sample=True,temperature=0.7"]
    with pytest.raises(ValueError, match="do_sample=True: the longshort model decodes greedily only"):
        check_arguments(argv)
    check_arguments(argv[:-1] + ["do_sample=False,temperature=0.7"])
    check_arguments([a if a != "longshort_passkey" else "longshort_ppl" for a in argv])
    # keys that make hf's transformers generate decode other than plain greedy were dropped without a word
    for other in ("num_beams=4", "repetition_penalty=1.3", "min_new_tokens=5"):
        with pytest.raises(ValueError, match=rf"^--gen_kwargs {other}: the longshort model decodes plain greedy"):
            check_arguments(argv[:-1] + [other])
    check_arguments(argv[:-1] + ["num_beams=1,repetition_penalty=1.0,top_p=0.9,max_gen_toks=8,until=X"])
    # a temperature without do_sample: lm-eval's normalize_gen_kwargs turns sampling on (its hf model samples), and
    # the run was refused only at its first generation, after the model loaded
    from lm_eval.models.utils import normalize_gen_kwargs

    assert normalize_gen_kwargs({"temperature": 0.7}, 8)["do_sample"] is True  # the reference: lm-eval's own rule
    with pytest.raises(ValueError, match=r"^--gen_kwargs temperature=0.7 without do_sample: lm-eval's hf model "
                                         r"samples at it, the longshort model decodes greedily only"):
        check_arguments(argv[:-1] + ["temperature=0.7"])
    check_arguments(argv[:-1] + ["temperature=0"])
    # a value lm-eval's normalize_gen_kwargs cannot read ended the run at its first generation, after the model had
    # loaded, in "could not convert string to float: 'abc'": refused first, under hf too, naming option and key
    hf = ["run", "--model", "hf", "--model_args", f"pretrained={tiny_llama2_dir}"] + argv[5:]
    for bad, key in (("temperature=abc", "temperature"), ("max_gen_toks=lots", "max_gen_toks")):
        with pytest.raises(ValueError):
            normalize_gen_kwargs({key: bad.split("=")[1]}, 8)  # the reference: lm-eval cannot read it
        for run in (argv, hf):
            with pytest.raises(ValueError, match=rf"^--gen_kwargs {bad}: lm-eval reads {key} as "):
                check_arguments(run[:-1] + [bad])
        check_arguments([a if a != "longshort_passkey" else "longshort_ppl" for a in argv[:-1] + [bad]])
    check_arguments(hf[:-1] + ["do_sample=True,temperature=0.7"])  # hf's generate samples as asked: not refused
    from torchtune_longshort.eval.model.generation import NUMERIC_KWARGS, unreadable_value

    # each key lm-eval converts, and values a --config YAML gives (null, a quoted number, a list), alone and beside
    # another token-count alias (lm-eval converts the first not null): refused exactly where lm-eval's
    # normalize_gen_kwargs raises (max_gen_toks: null, its default, was refused)
    cases = [{key: value} for key in NUMERIC_KWARGS for value in ("lots", None, "0.5" if key == "temperature" else "8",
                                                                  [1])]
    for given in cases + [{"max_gen_toks": 8, "max_tokens": "lots"}, {"max_gen_toks": None, "max_tokens": "lots"}]:
        try:
            normalize_gen_kwargs(given, 8)
            lm_eval_reads = True
        except (TypeError, ValueError):
            lm_eval_reads = False
        assert (unreadable_value(given) == "") == lm_eval_reads, given
    assert generates("longshort_babilong_qa1") and generates("arc_easy") and not generates("longshort_misalignment")


def test_gen_kwargs_do_sample_in_a_config_file_is_refused_before_lm_eval_starts(tiny_llama2_dir, sp_tokenizer_dir,
                                                                                tmp_path):
    """lm-eval's ``--config`` YAML with ``gen_kwargs: {do_sample: true}``: the wrapper did not read that key, so the
    run was refused only at its first generation (after loading and any earlier task, no results file)."""
    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv

    cfg = tmp_path / "run.yaml"
    margs = {"pretrained": str(tiny_llama2_dir), "tokenizer": str(sp_tokenizer_dir)}
    cfg.write_text(yaml.safe_dump({"model": "longshort", "tasks": ["longshort_passkey"], "device": "cpu",
                                   "model_args": margs, "gen_kwargs": {"do_sample": True, "temperature": 0.7}}))
    with pytest.raises(ValueError, match="do_sample=True: the longshort model decodes greedily only"):
        check_arguments(lm_eval_argv(["run", "--config", str(cfg)]))
    check_arguments(lm_eval_argv(["run", "--config", str(cfg), "--gen_kwargs", "do_sample=False"]))  # the line wins


def test_use_cache_does_not_replay_a_refusal_after_the_fix(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """lm-eval's --use_cache stored the refused request's NaN with its reason; a rerun replayed the NaN. Answers are
    still replayed, refusals asked again. The fix that refusal names (allow_extrapolation, a larger max_length)
    changes what a truncating task's answers are, so a cache of the model without it is refused, naming the field
    (503fc356), and the same model asks the refused request again."""
    from lm_eval.api.model import CachingLM

    db = str(tmp_path / "cache.db")
    reqs = [Instance("loglikelihood", {}, ("", "x = 1\n" * 60), 0), Instance("loglikelihood", {}, TEXTS[0], 1)]
    first = CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=600), db).loglikelihood(reqs)
    assert math.isnan(first[0][0]) and math.isfinite(first[1][0])
    with pytest.raises(ValueError, match="allow_extrapolation False there, True here"):
        CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=600, allow_extrapolation=True), db)
    again = CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=600), db)
    calls = []
    asked = again.lm.loglikelihood
    again.lm.loglikelihood = lambda r, **kw: calls.append(len(r)) or asked(r, **kw)
    second = again.loglikelihood(reqs)
    assert calls == [1] and math.isnan(second[0][0]) and second[1][0] == first[1][0]


def _many_reqs():
    pairs = [(ctx + " " * k, cont) for k in range(3) for ctx, cont in TEXTS]  # 12 requests, several lengths
    return [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]


def test_batch_size_auto_scores_as_batch_size_1(tiny_llama2_dir, sp_tokenizer_dir):
    """``batch_size=auto`` (refused before: "is not supported by the longshort model") scores every request type as
    ``batch_size=1`` does, and records the batch it ran (all 12 requests in one: max_batch_size 64)."""
    one, auto = (_lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size=b) for b in (1, "auto"))
    ref, got = (m.loglikelihood(_many_reqs(), disable_tqdm=True) for m in (one, auto))
    for r, g in zip(ref, got):
        assert g[0] == pytest.approx(r[0], abs=1e-5) and g[1] == r[1]
    assert auto.batch_size == "auto" and auto.batch_sizes == {0: 12} and one.batch_sizes == {}
    text = [Instance("loglikelihood_rolling", {}, ("for i in range(10):\n    print(i * i)\n" * 6,), 0)]
    rolled = one.loglikelihood_rolling(text, True)[0]
    assert auto.loglikelihood_rolling(text, True)[0] == pytest.approx(rolled, abs=1e-5)
    gen = [Instance("generate_until", {}, (ctx or "x", {"max_gen_toks": 5}), i) for i, (ctx, _) in enumerate(TEXTS)]
    assert auto.generate_until(gen, True) == one.generate_until(gen, True)


def test_batch_size_auto_halves_a_batch_out_of_memory_and_keeps_the_size_that_fits(
        tiny_llama2_dir, sp_tokenizer_dir, monkeypatch):
    """Fault injection: the model raises ``torch.OutOfMemoryError`` for a batch of more than 2 rows, and for any
    batch holding the longest request. ``auto`` with max_batch_size=16 tries 13 rows (all there are), 7, 4, 2 (with
    the longest), then the longest alone: refused NaN with the reason; the rest start again at 12 rows, 6, 3 and keep
    2. The scores equal ``batch_size=1``'s. A fixed size still retries an out-of-memory batch one request at a time."""
    reqs = _many_reqs() + [Instance("loglikelihood", {}, ("The grass is green. " * 3, " The sky is blue."), 12)]
    one = _lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size=1)
    widths, forward_one = [], one.model.forward
    monkeypatch.setattr(one.model, "forward", lambda tokens, **kw: widths.append(tokens.shape[1]) or
                        forward_one(tokens, **kw))
    ref = one.loglikelihood(reqs, disable_tqdm=True)
    longest = max(widths)
    assert widths.count(longest) == 1
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size="auto", max_batch_size=16)
    forward, rows = lm.model.forward, []

    def failing(tokens, *args, **kwargs):
        rows.append(tokens.shape[0])
        if tokens.shape[0] > 2 or tokens.shape[1] == longest:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")
        return forward(tokens, *args, **kwargs)

    monkeypatch.setattr(lm.model, "forward", failing)
    got = lm.loglikelihood(reqs, disable_tqdm=True)
    assert rows == [13, 7, 4, 2, 1, 12, 6, 3, 2, 2, 2, 2, 2, 2], rows
    assert lm.batch_sizes == {0: 2}
    refused = [i for i, g in enumerate(got) if g[0] != g[0]]
    assert len(refused) == 1 and "out of memory at" in got[refused[0]].refusal
    assert "(injected)" in got[refused[0]].refusal
    for i, (r, g) in enumerate(zip(ref, got)):
        assert i in refused or (g[0] == pytest.approx(r[0], abs=1e-5) and g[1] == r[1])
    fixed = _lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size=4)
    forward, rows = fixed.model.forward, []
    monkeypatch.setattr(fixed.model, "forward", failing)
    fixed.loglikelihood(reqs, disable_tqdm=True)
    assert rows[:5] == [4, 1, 1, 1, 1] and fixed.batch_sizes == {}


def test_dtype_takes_what_lm_evals_hf_takes(tiny_llama2_dir, sp_tokenizer_dir):
    """A ``torch.dtype`` from Python, torch's own names and ``auto`` (the checkpoint's config.json dtype, lm-eval's
    ``hf`` default) select that dtype; the model then runs in it."""
    from torchtune_longshort.eval.model.args import config_dtype, model_dtype

    for given, want in ((torch.bfloat16, torch.bfloat16), ("torch.float16", torch.float16), ("half", torch.float16),
                        ("float", torch.float32), ("bfloat16", torch.bfloat16), ("auto", None)):
        assert model_dtype(given) is want, given
    for bad in ("float64", torch.int8, "bf16x", "torch.nope"):
        with pytest.raises(ValueError, match="dtype=.* is not supported; accepted: float32, bfloat16, float16"):
            model_dtype(bad)
    assert config_dtype({"torch_dtype": "bfloat16"}) is torch.bfloat16
    assert config_dtype({"dtype": "float16", "torch_dtype": "bfloat16"}) is torch.float16
    assert config_dtype({"torch_dtype": "float64"}) is torch.float32 and config_dtype({}) is torch.float32
    lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, dtype=torch.bfloat16)
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    written = yaml.safe_load((tiny_llama2_dir / "config.json").read_text())
    assert _lm(tiny_llama2_dir, sp_tokenizer_dir, dtype="auto").args.dtype == config_dtype(written)


def test_lengths_past_an_explicit_max_length_are_refused_or_named_before_lm_eval_starts(
        tiny_llama2_dir, sp_tokenizer_dir, caplog):
    """``--model_args ...,max_length=512`` with ``longshort_passkey`` at its default 2k..32k ran the whole evaluation,
    then scored every metric NaN (exit 0): refused first when every length is past the limit, one warning line when
    some are; without an explicit max_length nothing is said (extrapolating is the point); LongBench-E sweeps none."""
    import json
    import logging

    from torchtune_longshort.eval.cli_run import check_arguments

    base = ["run", "--model", "longshort", "--device", "cpu", "--model_args"]
    margs = f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}"
    with pytest.raises(ValueError, match=r"^--model longshort runs at most 512 tokens \(max_length=512\), and every "
                                         r"length of the run is longer: longshort_passkey at 2k, 4k, 8k, 16k, 32k "):
        check_arguments(base + [margs + ",max_length=512,allow_extrapolation=true", "--tasks", "longshort_passkey"])
    with pytest.raises(ValueError, match=r"^--model longshort runs at most 256 tokens \(max_length=512, 256 tokens "
                                         r"without allow_extrapolation=true\)"):  # the tiny model's positions
        check_arguments(base + [margs + ",max_length=512", "--tasks", "longshort_passkey"])
    hf = ["run", "--model", "hf", "--model_args", f"pretrained={tiny_llama2_dir},max_length=512"]
    with pytest.raises(ValueError, match=r"^--model hf runs at most 512 tokens \(max_length=512\), and every length"):
        check_arguments(hf + ["--tasks", "longshort_ppl", "--metadata", "ppl_max_seq_lengths=1k"])
    caplog.set_level(logging.WARNING)
    check_arguments(base + [margs, "--tasks", "longshort_passkey"])  # no max_length: the model's own word
    check_arguments(base + [margs + ",max_length=512", "--tasks", "longshort_longbench_e"])
    assert "runs at most" not in caplog.text
    check_arguments(base + [margs + ",max_length=1k,allow_extrapolation=true", "--tasks",
                            "longshort_passkey,longshort_ppl,longshort_babilong", "--metadata",
                            json.dumps({"max_seq_lengths": "0k,1k,2k", "ppl_max_seq_lengths": "512",
                                        "passkey_max_seq_lengths": "1k,4k"})])
    assert caplog.text.count("runs at most") == 1
    assert ("--model longshort runs at most 1024 tokens (max_length=1k): longshort_passkey at 4k; longshort_babilong "
            "at 2k will score NaN (longer); the other lengths run") in caplog.text
    from torchtune_longshort.eval.length_fit import check_lengths_fit

    hf_args = {"pretrained": str(tiny_llama2_dir)}  # config.json: 256 positions, lm-eval's max_length= raises them
    assert check_lengths_fit({}, ["longshort_passkey"], "hf", hf_args) == ""  # not explicit: nothing said here
    hf_args["max_length"] = 1024  # one task wholly past, another within: a warning, the run goes on
    assert check_lengths_fit({"passkey_max_seq_lengths": "4k", "ppl_max_seq_lengths": "1k"},
                             ["longshort_passkey", "longshort_ppl"], "hf", hf_args).startswith(
        "--model hf runs at most 1024 tokens (max_length=1024): longshort_passkey at 4k will score NaN")
    with pytest.raises(ValueError, match=r"every length of the run is longer: longshort_babilong_qa1 at 2k would"):
        check_lengths_fit({"max_seq_lengths": "2k"}, ["longshort_babilong_qa1"], "hf", hf_args)  # a member


def test_log_samples_without_output_path_is_refused_in_lm_evals_words_before_it_starts(tiny_llama2_dir, tmp_path):
    """lm-eval's own rules between options (its ``EvaluatorConfig._validate_arguments``) refused the run only after
    its start-up (10-20 s) and another line: now first, with its message, the ``--config`` YAML's keys merged."""
    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv

    argv = ["run", "--model", "hf", "--model_args", f"pretrained={tiny_llama2_dir}", "--tasks", "arc_easy"]
    for flag in ("--log_samples", "--predict_only"):
        with pytest.raises(ValueError, match=r"^Specify --output_path if providing --log_samples or --predict_only$"):
            check_arguments(argv + [flag])
        check_arguments(argv + [flag, "--output_path", str(tmp_path)])
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"log_samples": True}))
    with pytest.raises(ValueError, match=r"^Specify --output_path"):
        check_arguments(lm_eval_argv(argv + ["--config", str(cfg)]))
    with pytest.raises(ValueError, match=r"^When `fewshot_as_multiturn` is True, `apply_chat_template` must be set"):
        check_arguments(argv + ["--fewshot_as_multiturn"])
    check_arguments(argv + ["--fewshot_as_multiturn", "false"])
    from torchtune_longshort.eval.cli_argv import check_option_pairs

    cfg.write_text(yaml.safe_dump({"apply_chat_template": True}))  # the YAML's key counts, as lm-eval merges it
    check_option_pairs(["run", "--fewshot_as_multiturn", "--config", str(cfg)])
    for on in (["--fewshot_as_multiturn", "--tasks", "x"], ["--fewshot_as_multiturn=yes"]):  # bare, then another
        with pytest.raises(ValueError, match=r"^When `fewshot_as_multiturn` is True"):  # option; lm-eval's 'yes'
            check_option_pairs(["run"] + on)
