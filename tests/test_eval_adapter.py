"""The ``longshort`` lm-eval model against independent references: transformers' forward pass of the same
checkpoint (log-likelihoods, batched and not, truncation) and greedy decoding by full forward passes (KV cache)."""

from __future__ import annotations

import math

import pytest
import yaml
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


CHAT = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")
TOOL = "{% for m in messages %}TOOL:{{ m['content'] }}{% endfor %}"


def test_apply_chat_template_renders_the_tokenizers_own_template_or_is_refused_before_the_model_loads(
        tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """``--apply_chat_template`` with ``--model longshort`` was a NotImplementedError traceback after the model
    loaded. The tokenizer folder's template renders as transformers (lm-eval's ``hf``) renders it; a folder without
    one is refused in one line by the wrapper's argument check, before any weight is read, unless no task of the run
    applies it."""
    import shutil

    from transformers import AutoTokenizer

    from torchtune_longshort.eval.cli_run import check_arguments

    with_chat = tmp_path / "tok"
    shutil.copytree(sp_tokenizer_dir, with_chat)
    (with_chat / "chat_template.jinja").write_text(CHAT)
    lm = _lm(tiny_llama2_dir, with_chat)
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    expected = AutoTokenizer.from_pretrained(str(with_chat)).apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True)
    assert lm.chat_template(True) == CHAT and lm.chat_template(False) is None
    assert lm.apply_chat_template(chat) == expected == "<system>be brief</system><user>2+2?</user><assistant>"
    argv = ["run", "--model", "longshort", "--model_args", f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}",
            "--tasks", "longshort_passkey", "--device", "cpu", "--apply_chat_template"]
    with pytest.raises(ValueError, match="has no chat template"):
        check_arguments(argv)
    check_arguments(argv[:-1] + ["--apply_chat_template", "False"])  # off: nothing to refuse
    check_arguments([a if not a.startswith("pretrained=") else f"pretrained={tiny_llama2_dir},tokenizer={with_chat}"
                     for a in argv])
    # a run whose every task ignores the option (longshort_ppl sizes its own context) needs no template: it was
    # refused, by the check and by the model when lm-eval asked it for the results file; hf answers None there
    check_arguments([a if a != "longshort_passkey" else "longshort_ppl" for a in argv])
    with pytest.raises(ValueError, match="has no chat template"):
        check_arguments([a if a != "longshort_passkey" else "longshort_ppl,longshort_passkey" for a in argv])
    # lm-eval's hf: transformers' "Cannot use chat template functions" came after the model loaded, naming no fix
    hf = [a if a != "longshort" else "hf" for a in argv]
    with pytest.raises(ValueError, match=rf"the tokenizer at {sp_tokenizer_dir} has no chat template"):
        check_arguments(hf)
    check_arguments([a if not a.startswith("pretrained=") else f"pretrained={tiny_llama2_dir},tokenizer={with_chat}"
                     for a in hf])
    check_arguments([a if a != "longshort_passkey" else "longshort_ppl" for a in hf])
    plain = _lm(tiny_llama2_dir, sp_tokenizer_dir)
    assert plain.chat_template(True) is None
    with pytest.raises(ValueError, match="has no chat template"):
        plain.apply_chat_template(chat)


@pytest.mark.parametrize("folder", ["named", "single"])
def test_apply_chat_template_name_picks_the_template_hf_picks(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, caplog,
                                                              folder):
    """``--apply_chat_template <name>`` with ``--model longshort`` was silently unused (the whole dict of named
    templates went to the results file). Now the template picked is lm-eval ``hf``'s (``TemplateLM.chat_template``
    on transformers' tokenizer of the same folder): the named one of a tokenizer with named templates, which the
    prompts render through, an unknown name refused (before the model loads too); a single template with one
    warning, as hf warns."""
    import logging
    import shutil
    from types import SimpleNamespace

    from lm_eval.api.model import TemplateLM
    from transformers import AutoTokenizer

    from torchtune_longshort.eval.cli_run import check_arguments

    tok = tmp_path / "tok"
    shutil.copytree(sp_tokenizer_dir, tok)
    (tok / "chat_template.jinja").write_text(CHAT)
    tool = TOOL
    if folder == "named":
        (tok / "additional_chat_templates").mkdir()
        (tok / "additional_chat_templates" / "tool_use.jinja").write_text(tool)
    hf = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(str(tok)))  # what lm-eval's hf picks from
    lm = _lm(tiny_llama2_dir, tok)
    chat = [{"role": "user", "content": "2+2?"}]
    name = "tool_use" if folder == "named" else "foo"
    with caplog.at_level(logging.WARNING):
        assert lm.chat_template(name) == TemplateLM.chat_template(hf, name) == (tool if folder == "named" else CHAT)
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("torchtune_longshort")]
    theirs = [r.getMessage() for r in caplog.records if r.name.startswith("lm_eval")]
    assert len(ours) == len(theirs) == (0 if folder == "named" else 1), caplog.records
    assert lm.apply_chat_template(chat) == ("TOOL:2+2?" if folder == "named" else "<user>2+2?</user><assistant>")
    assert TemplateLM.chat_template(hf, True) == CHAT  # the default, when no name is given
    # asked again without a name (the model of an earlier run, in lm-eval's simple_evaluate): the default, recorded
    # and rendered (the earlier name stayed: its template was recorded and rendered where hf records the default)
    assert lm.chat_template(True) == CHAT and lm.apply_chat_template(chat) == "<user>2+2?</user><assistant>"
    argv = ["run", "--model", "longshort", "--model_args", f"pretrained={tiny_llama2_dir},tokenizer={tok}",
            "--tasks", "longshort_passkey", "--device", "cpu", "--apply_chat_template", "nope"]
    if folder == "single":
        check_arguments(argv)  # hf warns and uses the template
        return
    with pytest.raises(ValueError, match="not available"):
        TemplateLM.chat_template(hf, "nope")
    with pytest.raises(ValueError, match=r"--apply_chat_template nope: .* no chat template named 'nope': give one of "
                                         r"\['default', 'tool_use'\]"):
        lm.chat_template("nope")
    lm.chat_template("tool_use")
    with pytest.raises(ValueError, match="no chat template named 'nope'"):
        lm.chat_template("nope")
    assert lm.apply_chat_template(chat) == "TOOL:2+2?"  # the refused name changed nothing
    assert _lm(tiny_llama2_dir, tok).chat_template(True) == CHAT  # no name: the default, as hf
    for model in ("longshort", "hf"):  # refused before any weight is read (hf raised once the model had loaded)
        with pytest.raises(ValueError, match="no chat template named 'nope'"):
            check_arguments([a if a != "longshort" else model for a in argv])
    check_arguments(argv[:-1] + ["tool_use"])


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
    """lm-eval's --use_cache stored the refused request's NaN with its reason; the rerun with the fix it named
    (here allow_extrapolation) replayed the NaN. Answers are still replayed, refusals asked again."""
    from lm_eval.api.model import CachingLM

    db = str(tmp_path / "cache.db")
    reqs = [Instance("loglikelihood", {}, ("", "x = 1\n" * 60), 0), Instance("loglikelihood", {}, TEXTS[0], 1)]
    first = CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=600), db).loglikelihood(reqs)
    assert math.isnan(first[0][0]) and math.isfinite(first[1][0])
    again = CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir, max_length=600, allow_extrapolation=True), db)
    calls = []
    asked = again.lm.loglikelihood
    again.lm.loglikelihood = lambda r, **kw: calls.append(len(r)) or asked(r, **kw)
    second = again.loglikelihood(reqs)
    assert calls == [1] and math.isfinite(second[0][0]) and second[1][0] == first[1][0]


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


def test_a_chat_template_of_a_tokenizer_of_its_own_code_is_not_asked_about_nor_run(tmp_path, monkeypatch):
    """``--apply_chat_template`` with a tokenizer folder whose tokenizer is its own code (``auto_map``): the
    pre-checks (``longshort-eval``'s, for longshort and hf) and the longshort model asked transformers, which put
    ``Do you wish to run the custom code? [y/N]`` on the console and waited 15 s, twice (a "y" ran the folder's
    code); e1f377c fixed it for the chat template's tokens only. The folder is now read without running its code:
    its templates from the files (it was then refused as having no chat template), rendered as transformers renders
    them for the same folder with its tokenizer as transformers' own class."""
    import json
    import shutil

    from family_checkpoints import own_code_tokenizer
    from transformers import AutoTokenizer

    from torchtune_longshort.eval.model.chat import lacks_template, render, select_template, template_tokenizer

    own_code_tokenizer(tmp_path, chat_template=[{"name": "default", "template": "{{ bos_token }}" + CHAT},
                                                {"name": "tool_use", "template": TOOL}])
    asked = []
    monkeypatch.setattr("builtins.input", lambda *a: asked.append(a) or "n")
    chat = template_tokenizer(tmp_path)
    assert lacks_template(tmp_path) is False and not asked, asked
    reference = tmp_path / "reference"  # the same files, the tokenizer transformers' own class
    reference.mkdir()
    shutil.copy(tmp_path / "tokenizer.json", reference)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    del config["auto_map"]
    own_class = {**config, "tokenizer_class": "PreTrainedTokenizerFast"}
    (reference / "tokenizer_config.json").write_text(json.dumps(own_class))
    hf = AutoTokenizer.from_pretrained(str(reference))
    assert chat.chat_template == hf.chat_template
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"},
               {"role": "assistant", "content": "4"}]
    for name in (None, "tool_use"):
        template, _ = select_template(chat.chat_template, name, tmp_path)
        for prompt in (True, False):  # the generation prompt, or continuing the last message
            expected = hf.apply_chat_template(history, tokenize=False, add_generation_prompt=prompt,
                                              continue_final_message=not prompt, chat_template=template)
            assert render(chat, history, prompt, template) == expected
    assert render(chat, history, False, chat.chat_template["default"]) == (
        "<s><system>be brief</system><user>2+2?</user><assistant>4")


@pytest.mark.parametrize("layout", ["config_list", "template_files"])
def test_named_templates_without_a_default_of_an_own_code_folder_are_picked_as_hf_picks(tmp_path, layout):
    """A tokenizer folder of its own code (``auto_map``) whose named templates have no ``default`` (a
    ``tokenizer_config.json`` list of them, or ``additional_chat_templates/<name>.jinja`` only): ``longshort-eval
    --apply_chat_template tool_use`` was refused, as lacking ``default`` ("transformers refuses it too") or as having
    no chat template, where transformers holds them and lm-eval's ``hf`` picks ``tool_use``. The reference: lm-eval's
    ``TemplateLM.chat_template`` on transformers' tokenizer of the same files, its class transformers' own."""
    import json
    import shutil
    from types import SimpleNamespace

    from family_checkpoints import own_code_tokenizer
    from lm_eval.api.model import TemplateLM
    from transformers import AutoTokenizer

    from torchtune_longshort.eval.model.chat import lacks_template, select_template, template_tokenizer

    own = tmp_path / "own"
    own.mkdir()
    if layout == "config_list":
        own_code_tokenizer(own, chat_template=[{"name": "tool_use", "template": TOOL}])
    else:
        own_code_tokenizer(own)
        (own / "additional_chat_templates").mkdir()
        (own / "additional_chat_templates" / "tool_use.jinja").write_text(TOOL)
    reference = tmp_path / "reference"
    shutil.copytree(own, reference)
    config = json.loads((own / "tokenizer_config.json").read_text())
    del config["auto_map"]
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (reference / "tokenizer_config.json").write_text(json.dumps(config))
    hf = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(str(reference)))
    chat = template_tokenizer(own)
    assert chat is not None and not lacks_template(own)
    assert select_template(chat.chat_template, "tool_use", own)[0] == TemplateLM.chat_template(hf, "tool_use") == TOOL
    with pytest.raises(ValueError):  # no name, no default: lm-eval's hf refuses too
        TemplateLM.chat_template(hf, True)
    with pytest.raises(ValueError, match=r"no chat template named 'default': give one of \['tool_use'\]"):
        select_template(chat.chat_template, None, own)
