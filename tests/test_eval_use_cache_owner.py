"""lm-eval's ``--use_cache`` keys its responses on the request alone: the ``longshort`` model signs the cache and
refuses one holding another model's answers, which lm-eval would otherwise hand back as its own."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.model import CachingLM  # noqa: E402
from sqlitedict import SqliteDict  # noqa: E402

from torchtune_longshort.eval.model.adapter import LongShortLM  # noqa: E402

TEXTS = [f"def f{i}(x):\n    return x * {i} + {i * i}\n" * 2 for i in range(2)]


def _lm(ckpt, tok, **kw) -> LongShortLM:
    return LongShortLM(checkpoint_dir=str(ckpt), tokenizer=str(tok), device="cpu", **kw)


def _requests():
    return [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(TEXTS)]


def test_another_rope_setting_is_refused_the_first_ones_cached_answers(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    db = str(tmp_path / "c_rank0.db")
    plain = CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir), db).loglikelihood_rolling(_requests())
    scaled_lm = _lm(tiny_llama2_dir, sp_tokenizer_dir, rope="linear", rope_factor=2)
    scaled = scaled_lm.loglikelihood_rolling(_requests(), disable_tqdm=True)  # its own answers, no cache
    assert all(abs(a - b) > 1e-3 for a, b in zip(plain, scaled))  # replaying the first's would be a wrong number
    with pytest.raises(ValueError, match=r"^--use_cache: .*c_rank0\.db holds the answers of another model \(rope"):
        CachingLM(scaled_lm, db)
    # the same model (another batch size: the same numbers) still reads what it stored
    again = CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir, batch_size=2), db)
    assert again.loglikelihood_rolling(_requests()) == plain


def test_a_cache_of_unsigned_answers_is_refused(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    db = str(tmp_path / "hf_rank0.db")
    with SqliteDict(db, autocommit=True) as d:  # what lm-eval's hf model leaves: answers under request hashes only
        d["0" * 64] = -1.0
    with pytest.raises(ValueError, match=r"^--use_cache: .*holds 1 answer of an unnamed model"):
        CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir), db)


def _run(model, margs, prefix, *more):
    return ["run", "--model", model, "--model_args", margs, "--tasks", "longshort_ppl", "--device", "cpu",
            "--use_cache", str(prefix), *more]


def test_longshort_eval_refuses_hf_a_cache_the_longshort_model_signed(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """`longshort-eval run --model longshort ... --use_cache c`, then `--model hf` with the same path: hf never
    looks at the signature, and lm-eval replayed the longshort model's answers as hf's (exit 0). The wrapper refuses
    it before lm-eval starts, the file left as it was; hf's own (unsigned) cache is hf's to reuse."""
    from torchtune_longshort.eval.cli_run import check_arguments

    db = tmp_path / "c_rank0.db"  # lm-eval's evaluator: <use_cache>_rank<rank>.db
    CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir), str(db)).loglikelihood_rolling(_requests()[:1])
    before = db.read_bytes()
    hf = _run("hf", f"pretrained={tiny_llama2_dir}", tmp_path / "c")
    with pytest.raises(ValueError, match=r"^--use_cache: .*c_rank0\.db holds the answers of a longshort model; .*"
                                         r"give --model hf its own --use_cache path"):
        check_arguments(hf)
    assert db.read_bytes() == before
    with SqliteDict(str(tmp_path / "h_rank0.db"), autocommit=True) as d:  # what lm-eval's hf leaves
        d["0" * 64] = -1.0
    check_arguments(hf[:-1] + [str(tmp_path / "h")])


def test_longshort_eval_refuses_another_models_cache_before_the_model_loads(tiny_llama2_dir, sp_tokenizer_dir,
                                                                           tmp_path):
    """The model refused another model's cache only once it had loaded (lm-eval hands it the cache then); the
    wrapper now compares the identity the model signs with, computed from --model_args without reading a weight,
    before lm-eval starts: nothing is created or signed, and the model that signed the cache still runs with it."""
    from torchtune_longshort.eval.cli_run import check_arguments

    db = tmp_path / "c_rank0.db"
    CachingLM(_lm(tiny_llama2_dir, sp_tokenizer_dir, rope="linear", rope_factor=2), str(db))  # signs it
    before = db.read_bytes()
    plain = f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}"
    with pytest.raises(ValueError, match=r"^--use_cache: .*c_rank0\.db holds the answers of another model \(rope"):
        check_arguments(_run("longshort", plain, tmp_path / "c"))
    assert db.read_bytes() == before
    check_arguments(_run("longshort", plain + ",rope=linear,rope_factor=2", tmp_path / "c", "--batch_size", "2"))
    with SqliteDict(str(tmp_path / "h_rank0.db"), autocommit=True) as d:  # unsigned answers (lm-eval's hf)
        d["0" * 64] = -1.0
    with pytest.raises(ValueError, match=r"^--use_cache: .*h_rank0\.db holds 1 answer of an unnamed model"):
        check_arguments(_run("longshort", plain, tmp_path / "h"))
    check_arguments(_run("longshort", plain, tmp_path / "new"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c_rank0.db", "h_rank0.db"]  # nothing created
