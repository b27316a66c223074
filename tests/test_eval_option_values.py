"""lm-eval's typed ``run`` options refused by ``longshort-eval`` in one line naming the option and what it takes:
lm-eval's parser named its type function (``argument --seed: invalid functools.partial(<function
_int_or_none_list_arg_type at 0x...>, 3, 4, '0,1234,1234,1234') value: 'x'``)."""

from __future__ import annotations

import sys
from functools import partial

import pytest

pytest.importorskip("lm_eval")


def _seed(value):  # lm-eval's own reading of --seed, the reference for what is taken
    from lm_eval._cli.utils import _int_or_none_list_arg_type

    return partial(_int_or_none_list_arg_type, 3, 4, "0,1234,1234,1234")(value)


def test_a_bad_typed_value_is_one_line_naming_the_option_and_what_it_takes():
    from torchtune_longshort.eval.cli_run import lm_eval_argv

    for args in (["--seed", "x"], ["--seed", "1,2"], ["--seed=1,2,3,4,5"], ["-L", "abc"], ["--num_fewshot", "x"],
                 ["--max_batch_size", "x"], ["--samples", "{x"], ["--fewshot_as_multiturn", "maybe"]):
        with pytest.raises(ValueError) as e:
            lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", *args])
        line, name = str(e.value), args[0].split("=")[0].replace("-L", "--limit")
        assert line.startswith(name + " ") and "\n" not in line and " give " in line, line
        assert "functools" not in line and "<function" not in line and "try_parse_json" not in line, line
    for bad in ("x", "1,2", "1,2,3,4,5", "1.5"):  # refused where lm-eval's own parser refuses them
        with pytest.raises(ValueError):
            _seed(bad)
    # what the --seed line offers is what lm-eval takes, and longshort-eval passes it on
    for good in ("42", "0,None,8,52", "1,2,3"):
        _seed(good)
        out = lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--seed", good])
        assert out[out.index("--seed") + 1] == good
    out = lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--fewshot_as_multiturn", "--limit", "2"])
    assert "--fewshot_as_multiturn" in out  # bare: lm-eval's const True


def test_the_refusal_is_the_whole_output_exit_2_and_nothing_written(capsys, monkeypatch, tmp_path):
    from torchtune_longshort.eval.__main__ import main

    out_dir = tmp_path / "results"
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run", "--model", "hf", "--tasks", "longshort_ppl", "--seed",
                                      "x", "--output_path", str(out_dir)])
    with pytest.raises(SystemExit) as e:
        main()
    out, err = capsys.readouterr()
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("longshort-eval: error: --seed x: "), err
    assert not out_dir.exists()


def test_json_that_does_not_parse_names_its_option():
    """``--model_args '{bad'`` and ``--gen_kwargs '{bad'`` gave lm-eval's "Invalid JSON: {bad. Hint: Use double
    quotes for JSON strings.", naming no option (``--metadata`` alone was named)."""
    import json

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    for name, value in (("--model_args", "{bad"), ("--gen_kwargs", "{'max_gen_toks': 64}"),
                        ("--metadata", "{'max_seq_lengths': '1k'}"), ("--wandb_args", "{x")):
        with pytest.raises(ValueError):
            json.loads(value)  # the reference: not JSON
        with pytest.raises(ValueError) as e:
            lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", name, value])
        line = str(e.value)
        assert line.startswith(f"{name} {value!r} is not JSON (") and "\n" not in line, line
        example = line.split(f"e.g. {name} '", 1)[1].split("' (double quotes", 1)[0]
        assert isinstance(json.loads(example), dict), line  # the spelling it offers parses



def test_bad_json_in_an_earlier_occurrence_names_its_option():
    """``--model_args '{bad' --model_args pretrained=/p``: only the last occurrence was checked, and lm-eval, which
    merges every occurrence (MergeDictAction), refused the first in its own words, naming no option ("Invalid JSON:
    {bad. Hint: ..."). The reference: lm-eval's own parser refuses that command line."""
    from lm_eval._cli.harness import HarnessCLI

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    for name, bad, good in (("--model_args", "{bad", "pretrained=/p"), ("--gen_kwargs", "{'x': 1}", "max_gen_toks=8")):
        args = ["run", "--model", "hf", "--tasks", "longshort_ppl", name, bad, name, good]
        with pytest.raises(ValueError, match="Invalid JSON"):  # the earlier value is read, not dropped
            HarnessCLI()._parser.parse_args(args)
        with pytest.raises(ValueError) as e:
            lm_eval_argv(args)
        assert str(e.value).startswith(f"{name} {bad!r} is not JSON ("), str(e.value)


def _hf_batch_size(value):  # lm-eval's hf reading of --batch_size (HFLM.__init__), the reference for what it takes
    if str(value).startswith("auto"):
        parts = value.split(":")
        return parts[0], float(parts[1]) if len(parts) > 1 else 1
    return int(value), 1


@pytest.mark.parametrize("model", ["hf", "longshort"])
def test_a_bad_batch_size_is_refused_naming_the_flag_before_any_model_loads(model):
    # `--batch_size x` loaded the model, then hf said "invalid literal for int() with base 10: 'x'" and ours
    # "batch_size='x' is not an integer" (a model argument); the pretrained folder here does not exist, so a
    # refusal that reached the model would name it
    from torchtune_longshort.eval.cli_run import lm_eval_argv

    run = ["run", "--model", model, "--model_args", "pretrained=/nonexistent", "--tasks", "longshort_ppl"]
    for bad in ("x", "1.5", "auto:x", "auto:"):
        with pytest.raises(ValueError):
            _hf_batch_size(bad)
        with pytest.raises(ValueError) as e:
            lm_eval_argv([*run, "--batch_size", bad])
        line = str(e.value)
        assert line.startswith(f"--batch_size {bad}: ") and "auto:N" in line and "\n" not in line, line
    with pytest.raises(ValueError, match=r"^--model_args batch_size=x: "):
        lm_eval_argv(["run", "--model", "hf", "--model_args", "pretrained=/nonexistent,batch_size=x", "--tasks",
                      "longshort_ppl"])
    for good in ("8", "auto", "auto:4", "auto:2.5"):  # what lm-eval's hf takes goes on to it
        _hf_batch_size(good)
        if model == "hf":
            out = lm_eval_argv([*run, "--batch_size", good])
            assert out[out.index("--batch_size") + 1] == good


def test_a_negative_num_fewshot_is_refused_before_the_run():
    # `--num_fewshot -1` passed lm-eval's parser (type=int) and the run went ahead as 0-shot, recording -1
    import random

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    run = ["run", "--model", "hf", "--tasks", "longshort_ppl"]
    for bad in ("-1", "-5"):
        with pytest.raises(ValueError):
            random.Random(0).sample(range(10), int(bad))  # the reference: no count of examples to draw
        for args in (["--num_fewshot", bad], [f"--num_fewshot={bad}"], ["-f", bad]):
            with pytest.raises(ValueError) as e:
                lm_eval_argv([*run, *args])
            line = str(e.value)
            assert line.startswith(f"--num_fewshot {bad} ") and "0 or more" in line and "\n" not in line, line
    for good in ("0", "5"):
        random.Random(0).sample(range(10), int(good))
        out = lm_eval_argv([*run, "--num_fewshot", good])
        assert out[out.index("--num_fewshot") + 1] == good


@pytest.mark.parametrize("model", ["hf", "longshort"])
def test_a_max_batch_size_below_one_is_refused_naming_the_flag_before_any_model_loads(model):
    # `--max_batch_size 0` / `-1` passed lm-eval's parser (type=int): hf's `--batch_size auto` started accelerate's
    # search there once the model had loaded (0: batch size 1 without a word; -1: a torch error), and the longshort
    # model refused them as its own argument, `max_batch_size='0' must be a positive integer`
    import torch
    from accelerate.utils import find_executable_batch_size

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    def hf_detects(size):  # the reference: hf's batch detection (HFLM._detect_batch_size) started at `size`
        @find_executable_batch_size(starting_batch_size=size)
        def forward(batch):
            return torch.ones((batch, 2)).shape[0]

        return forward()

    run = ["run", "--model", model, "--tasks", "longshort_ppl", "--batch_size", "auto"]
    for bad in ("0", "-1"):
        with pytest.raises(RuntimeError):
            hf_detects(int(bad))
        for args, given in ((["--model_args", "pretrained=/nonexistent", "--max_batch_size", bad],
                             f"--max_batch_size {bad}"),
                            (["--model_args", f"pretrained=/nonexistent,max_batch_size={bad}"],
                             f"--model_args max_batch_size={bad}")):
            with pytest.raises(ValueError) as e:
                lm_eval_argv([*run, *args])
            line = str(e.value)
            assert line.startswith(f"{given} is not accepted: ") and "1 or more" in line and "\n" not in line, line
    for good in ("1", "64"):
        assert hf_detects(int(good)) == int(good)
        if model == "hf":
            out = lm_eval_argv([*run, "--model_args", "pretrained=/nonexistent", "--max_batch_size", good])
            assert out[out.index("--max_batch_size") + 1] == good


@pytest.mark.parametrize("model", ["hf", "longshort"])
def test_a_max_batch_size_in_model_args_that_is_no_whole_number_is_refused_naming_what_was_typed(model):
    # `--model_args max_batch_size=abc` went on as `--max_batch_size abc`: hf's run said "argument --max_batch_size:
    # invalid int value: 'abc'", naming a flag the user did not type
    from torchtune_longshort.eval.cli_argv import _run_actions
    from torchtune_longshort.eval.cli_run import lm_eval_argv

    takes = next(a.type for a in _run_actions() if "--max_batch_size" in a.option_strings)  # lm-eval's own reading
    for bad in ("abc", "2.5"):
        with pytest.raises(ValueError):
            takes(bad)
        with pytest.raises(ValueError) as e:
            lm_eval_argv(["run", "--model", model, "--tasks", "longshort_ppl",
                          "--model_args", f"pretrained=/nonexistent,max_batch_size={bad}"])
        line = str(e.value)
        assert line.startswith(f"--model_args max_batch_size={bad} ") and "1 or more" in line and "\n" not in line


def test_a_batch_size_hf_takes_but_the_longshort_model_does_not_is_refused_naming_the_flag():
    # `--batch_size auto:2.5` passed the flag's check (hf reads N by float) and the longshort model then refused it
    # naming its own argument, `batch_size='auto:2.5' is not accepted: ...`; `auto:inf` passed too, for every model
    from torchtune_longshort.eval.cli_run import lm_eval_argv
    from torchtune_longshort.eval.model.args import batch_sizes

    def run(model, *args):
        return lm_eval_argv(["run", "--model", model, "--tasks", "longshort_ppl", *args])

    for value in ("auto:2.5", "auto:2.0", "auto:1e1"):
        _hf_batch_size(value)  # hf takes it
        with pytest.raises(ValueError):
            batch_sizes(value, None)  # the reference: the longshort model's own reading refuses it
        out = run("hf", "--model_args", "pretrained=/nonexistent", "--batch_size", value)
        assert out[out.index("--batch_size") + 1] == value
        for args, given in ((["--model_args", "pretrained=/nonexistent", "--batch_size", value],
                             f"--batch_size {value}"),
                            (["--model_args", f"pretrained=/nonexistent,batch_size={value}"],
                             f"--model_args batch_size={value}")):
            with pytest.raises(ValueError) as e:
                run("longshort", *args)
            line = str(e.value)
            assert line.startswith(f"{given}: the longshort model takes ") and "\n" not in line, line
    every = _hf_batch_size("auto:inf")[1]
    with pytest.raises(ZeroDivisionError):
        3 // int(12 / every)  # the reference: hf's _batch_scheduler, pos // int(len(requests) / N)
    assert every > 0  # a positive number by Python's reading: what the refusal says N is must leave it out
    for model in ("hf", "longshort"):
        with pytest.raises(ValueError, match=r"^--batch_size auto:inf: give a whole number") as e:
            run(model, "--model_args", "pretrained=/nonexistent", "--batch_size", "auto:inf")
        assert "N a finite positive number" in str(e.value)  # was "N a positive number", which inf is
    batch_sizes("auto:4", None)
    run("hf", "--model_args", "pretrained=/nonexistent", "--batch_size", "auto:4")


def test_hf_auto_n_over_fewer_requests_than_n_detects_at_each_request_instead_of_dividing_by_zero(monkeypatch, caplog):
    # `--limit 1 --batch_size auto:2.5` (any auto:N over fewer than N requests) ended in lm-eval's traceback once the
    # model had loaded: HFLM._batch_scheduler re-detects every int(len(requests) / N) requests, 0 there. The reference
    # is lm-eval's own method on the same input; a model stand-in (no weights) whose detection records its position.
    from lm_eval import evaluator
    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.utils import Collator

    from torchtune_longshort.eval.cli_argv import hf_auto_schedule_floored

    def stand_in(every):
        lm = HFLM.__new__(HFLM)
        lm.batch_schedule, lm.batch_sizes, lm.max_batch_size, lm.detected = every, {}, 64, []
        lm._detect_batch_size = lambda requests, pos: lm.detected.append(pos) or 8
        return lm

    def chunks(lm, n):  # hf's _loglikelihood_tokens: re_ord.get_batched(n=0, batch_fn=self._batch_scheduler)
        return [len(c) for c in Collator.get_chunks(list(range(n)), n=0, fn=lm._batch_scheduler)]

    with pytest.raises(ZeroDivisionError):
        chunks(stand_in(2.5), 1)  # lm-eval's own method, as `hf` ran it
    upstream = stand_in(2.5)
    upstream_chunks = chunks(upstream, 20)  # enough requests: what lm-eval does, left as it is
    monkeypatch.setattr(evaluator, "evaluate", lambda lm, n: (chunks(lm, n), lm.detected, lm.batch_schedule))
    scheduler, evaluate = HFLM._batch_scheduler, evaluator.evaluate
    with hf_auto_schedule_floored():
        assert evaluator.evaluate(stand_in(2.5), 1) == ([1], [0], 2.5)
        assert evaluator.evaluate(stand_in(5), 3) == ([3], [0, 1, 2], 5)  # a detection at each request
        assert evaluator.evaluate(stand_in(2.5), 20) == (upstream_chunks, upstream.detected, 2.5)
    assert HFLM._batch_scheduler is scheduler and evaluator.evaluate is evaluate  # both restored
    notes = [r.getMessage() for r in caplog.records if "auto:" in r.getMessage()]
    assert notes == ["--batch_size auto:2.5: 1 request in a list, fewer than 2.5: hf detects its batch size at each "
                     "request (lm-eval's own schedule divides by int(1 / 2.5) = 0)"]  # one line, once a run
