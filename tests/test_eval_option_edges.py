"""Edges of :mod:`torchtune_longshort.eval.cli_argv` no earlier test held, each against lm-eval's own reading: a
``--batch_size`` of 0, below 0, ``auto:0`` or ``auto12`` is refused naming the flag before any model loads (the
longshort model's own reading refuses each, and hf's ``auto:0`` divides by zero); an option given twice is read as
lm-eval's parser reads it, the last one counting; a flag left without its value at the end is no value."""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.cli_argv import option, option_values
from torchtune_longshort.eval.cli_run import lm_eval_argv
from torchtune_longshort.eval.model.args import batch_sizes

RUN = ["run", "--model", "hf", "--model_args", "pretrained=/nonexistent", "--tasks", "longshort_ppl"]


@pytest.mark.parametrize("bad", ["0", "-1", "auto:0", "auto12"])
def test_a_batch_size_no_model_takes_is_refused_naming_the_flag(bad):
    with pytest.raises(ValueError):
        batch_sizes(bad, None)  # the reference: the longshort model's own reading
    if bad == "auto:0":
        with pytest.raises(ZeroDivisionError):
            int(12 / float(bad.split(":")[1]))  # hf's _batch_scheduler: int(len(requests) / N)
    with pytest.raises(ValueError) as e:
        lm_eval_argv([*RUN, "--batch_size", bad])
    assert str(e.value).startswith(f"--batch_size {bad}: ") and "\n" not in str(e.value), str(e.value)


def test_an_option_given_twice_is_read_as_lm_evals_parser_reads_it():
    from lm_eval._cli.harness import HarnessCLI

    for first, last in (("0", "5"), ("5", "0")):
        args = [*RUN, "--limit", first, "--limit", last]
        parsed = HarnessCLI()._parser.parse_args(args)
        assert float(option(args, "--limit")) == parsed.limit == float(last)
        if last == "0":
            with pytest.raises(ValueError, match="^--limit 0 is not accepted"):
                lm_eval_argv(args)
        else:
            out = lm_eval_argv(args)
            k = max(i for i, a in enumerate(out) if a == "--limit")
            assert out[k + 1] == last


def test_a_flag_at_the_end_without_its_value_is_no_value():
    from lm_eval._cli.harness import HarnessCLI

    args = [*RUN, "--limit"]
    with pytest.raises(SystemExit):  # lm-eval's parser: expected one argument
        HarnessCLI()._parser.parse_args(args)
    assert option_values(args, "--limit") == [] and option(args, "--limit") is None
