"""BABILong rows generated to fit their label: with ``fit="prompt"`` the whole request the pack's task makes of a row
(BOS, lm-eval's prompt with its two examples, or with ``prompt="babilong"`` BABILong's own prompt, the input, the
question, and the task's generation budget), counted
with the eval tokenizer, is at most the label's tokens, so a "1k" row runs on a model of ``max_length=1024``. The
reference is lm-eval itself: the pack's tasks loaded by its TaskManager over the generated folder, their requests
built as an evaluation builds them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.tasks.babilong import generator as gen  # noqa: E402
from torchtune_longshort.eval.tasks.babilong import haystack  # noqa: E402

QAS = ["qa1", "qa3"]
LABELS = ["1k", "2k"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, sp_tokenizer_dir):
    out = tmp_path_factory.mktemp("babilong_fit")
    gen.generate(out / "scattered", QAS, LABELS, n=2, tokenizer=str(sp_tokenizer_dir), seed=3, fit="prompt")
    gen.generate(out / "depth", QAS, LABELS, n=1, depths=[0, 50, 100], tokenizer=str(sp_tokenizer_dir), seed=4,
                 fit="prompt")
    gen.generate(out / "babilong", QAS, LABELS, n=1, tokenizer=str(sp_tokenizer_dir), seed=5, fit="prompt",
                 prompt="babilong")
    return out


def _requests(folder, qa, prompt="lm_eval"):
    """The pack task's requests over ``folder`` with prompt ``prompt``, as lm-eval builds them for an evaluation."""
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval.tasks import tasks_path

    name = f"longshort_babilong_{qa}"
    manager = TaskManager(include_path=str(tasks_path()), include_defaults=False,
                          metadata={"babilong_data_dir": str(folder), "max_seq_lengths": ",".join(LABELS),
                                    "babilong_prompt": prompt})
    task = manager.load([name])["tasks"][name]
    task.build_all_requests(rank=0, world_size=1)
    return task.instances


@pytest.mark.parametrize("variant", ["scattered", "depth", "babilong"])
def test_every_request_fits_its_label_with_the_generation_budget(fitted, sp_tokenizer_dir, variant):
    from torchtune_longshort.eval.model.limits import RequestLimits
    from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer

    tok = TaskTokenizer(str(sp_tokenizer_dir))
    for qa in QAS:
        rows = {(json.loads(line)["input"]): json.loads(line)
                for label in LABELS for line in (fitted / variant / label / f"{qa}.jsonl").read_text().splitlines()}
        instances = _requests(fitted / variant, qa, "babilong" if variant == "babilong" else "lm_eval")
        assert len(instances) == len(rows)
        for inst in instances:
            prompt, gen_kwargs = inst.arguments
            label = inst.doc["length"]
            budget = haystack.LENGTHS[label]
            needed = 1 + len(tok.encode(prompt)) + int(gen_kwargs["max_gen_toks"])  # BOS + prompt + generation
            assert needed <= budget, (qa, label, needed)
            assert needed >= budget - 64  # and the label is still the request's size: the haystack fills it
            row = rows[inst.doc["input"]]
            assert row["prompt_tokens"] + row["max_gen_toks"] == needed and row["length_tokens"] == budget
            assert row["babilong_prompt"] == ("babilong" if variant == "babilong" else "lm_eval")
            assert ("<context>" in prompt) == (variant == "babilong")
            # the eval model's own rule: a prompt within max_length - max_gen_toks runs uncut
            plan = RequestLimits("longshort", budget, budget).plan(needed - int(gen_kwargs["max_gen_toks"]),
                                                                   int(gen_kwargs["max_gen_toks"]), "generate_until")
            assert not plan.reason and not plan.cut


def test_the_depth_variant_still_places_its_facts(fitted, sp_tokenizer_dir):
    from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer

    tok = TaskTokenizer(str(sp_tokenizer_dir))
    for qa in QAS:
        # at 1k a qa3 story and the prompt leave ~100 haystack tokens, fewer than one word's worth of the stated
        # depth slack: the depth is checked where the haystack has room
        for label in LABELS[1:]:
            for line in (fitted / "depth" / label / f"{qa}.jsonl").read_text().splitlines():
                r = json.loads(line)
                block = " ".join(r["facts"])
                start = r["input"].index(block)
                before = len(tok.encode(r["input"][:start])) if start else 0
                hay = len(tok.encode(r["input"])) - len(tok.encode(block))
                assert haystack.within_depth_tolerance(before / hay, r["depth"], hay), (r["depth"], before / hay)


def test_fit_input_is_unchanged_and_fit_is_checked(tmp_path, sp_tokenizer_dir, capsys):
    """The default still sizes the input alone (BABILong's way), within the stated tolerance, and adds no field."""
    gen.generate(tmp_path / "a", ["qa1"], ["1k"], n=2, tokenizer=str(sp_tokenizer_dir), seed=5)
    gen.generate(tmp_path / "b", ["qa1"], ["1k"], n=2, tokenizer=str(sp_tokenizer_dir), seed=5, fit="input")
    a, b = ((tmp_path / x / "1k" / "qa1.jsonl").read_text() for x in "ab")
    assert a == b and "prompt_tokens" not in a
    assert all(haystack.within_length_tolerance(json.loads(r)["n_tokens"], 1024) for r in a.splitlines())
    with pytest.raises(ValueError, match="fit='all'; accepted: input, prompt"):
        gen.generate(tmp_path / "c", ["qa1"], ["1k"], n=1, tokenizer=str(sp_tokenizer_dir), fit="all")
    # BABILong's prompt sizes a request: without fit="prompt" it would size nothing; a misspelled one is refused
    with pytest.raises(ValueError, match="prompt='babilong' sizes the task's request, and fit='input'"):
        gen.generate(tmp_path / "c", ["qa1"], ["1k"], n=1, tokenizer=str(sp_tokenizer_dir), prompt="babilong")
    # the command names its flags as typed (it said prompt='babilong' and fit='input', generate()'s spellings)
    with pytest.raises(SystemExit):
        gen.main(["--out", str(tmp_path / "c"), "--tokenizer", str(sp_tokenizer_dir), "--prompt", "babilong"])
    err = capsys.readouterr().err.strip()
    assert err.endswith("error: --prompt babilong sizes the task's request, and --fit input sizes the input alone: "
                        "give --fit prompt with it") and len(err.splitlines()) == 1, err
    with pytest.raises(ValueError, match="prompt='babilon'; accepted: lm_eval, babilong"):
        gen.generate(tmp_path / "c", ["qa1"], ["1k"], n=1, tokenizer=str(sp_tokenizer_dir), fit="prompt",
                     prompt="babilon")
    assert not (tmp_path / "c").exists()


def test_rows_sized_for_one_prompt_are_refused_under_the_other(fitted):
    """Rows record the prompt they were sized for (babilong_prompt), and nothing read it: rows sized for lm-eval's
    prompt evaluated under BABILong's longer one had requests past the label (past eval.max_length: refused, NaN,
    at the longest label), with no word of why. Each way round is now refused naming the fix; so are rows made
    before the rows recorded it (sized for lm-eval's)."""
    from torchtune_longshort.eval.tasks.babilong.task import load_babilong
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

    for variant, style, sized_for in (("scattered", "babilong", "lm_eval"), ("babilong", "lm_eval", "babilong")):
        with pytest.raises(TaskDataError, match=rf"sized for the '{sized_for}' prompt .* generate the rows again with "
                                                rf"--prompt {style}, or evaluate with babilong_prompt='{sized_for}'$"):
            load_babilong("qa1", LABELS[0], str(fitted / variant), babilong_missing="error", babilong_prompt=style)
        assert len(load_babilong("qa1", LABELS[0], str(fitted / variant), babilong_prompt=sized_for)["qa1"]) > 0
    old = fitted.parent / "before_recorded"
    rows = (fitted / "scattered" / LABELS[0] / "qa1.jsonl").read_text().splitlines()
    (old / LABELS[0]).mkdir(parents=True)
    (old / LABELS[0] / "qa1.jsonl").write_text("".join(
        json.dumps({k: v for k, v in json.loads(r).items() if k != "babilong_prompt"}) + "\n" for r in rows))
    with pytest.raises(TaskDataError, match="sized for the 'lm_eval' prompt"):
        load_babilong("qa1", LABELS[0], str(old), babilong_missing="error", babilong_prompt="babilong")
