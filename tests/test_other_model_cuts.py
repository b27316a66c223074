"""A generation request the pack's task sends to another model (--model hf) is planned with that model's cuts:
lm-eval's hf cuts a long prompt from the left only (HFLM.tok_batch_encode's one cut, left_truncate_len, the
reference), so a prompt its task declares may be cut in the middle (LongBench-E) and that does not fit is refused,
not sent for hf to cut from the left (the instruction lost, scored as if the protocol's). A hand mutant of
eval/model/limits.RequestLimits.of_other_model giving hf every cut survived test_eval_adapter, test_babilong_fit
and test_reliability_eval's policy test (mutants12)."""

from __future__ import annotations

import inspect

import pytest

from torchtune_longshort.eval.model.limits import RequestLimits

pytest.importorskip("lm_eval")


def test_hf_takes_only_the_left_cut_lm_eval_makes():
    from lm_eval.models.huggingface import HFLM

    params = set(inspect.signature(HFLM.tok_batch_encode).parameters)
    assert "left_truncate_len" in params and not any("middle" in p or "right" in p for p in params)
    limits = RequestLimits.of_other_model("hf", 64)
    middle = limits.plan(100, 8, "generate_until", declared="middle")
    assert "may only be cut middle (declared by the task), which --model hf cannot do" in middle.reason
    left = limits.plan(100, 8, "generate_until", declared="left")
    assert (left.reason, left.cut, left.keep) == ("", "left", 56)
