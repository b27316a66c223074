"""``model_args_argv`` reads ``--model_args`` as lm-eval 0.4.13's own parser merges them: its ``-a`` short option,
a JSON ``null``, a key given twice (the last wins), JSON then ``key=value`` tokens, an invalid JSON left to lm-eval to
refuse; an item written after ``, `` is moved out of the model's arguments as ``device`` (lm-eval would pass
``' device'`` to the model); a token no value of which changes stays as typed. Checked against lm-eval's own parse."""

from __future__ import annotations

import pytest
from lm_eval._cli.utils import try_parse_json

from torchtune_longshort.eval.cli_run import lm_eval_argv
from torchtune_longshort.eval.model_args_argv import json_fix, model_args_value, model_args_values_mapped

BASE = ["run", "--model", "hf", "--tasks", "longshort_ppl"]


def _lm_eval_reads(argv):
    from lm_eval._cli.harness import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    return EvaluatorConfig.from_cli(HarnessCLI()._parser.parse_args(argv))


@pytest.mark.parametrize("given", [
    ["-a", "device=cuda:7"],
    ["--model_args", '{"device": null, "pretrained": "p"}'],
    ["--model_args", "device=cpu,device=cuda:3"],
    ["--model_args", '{"device": "cpu"}', "--model_args", "device=cuda:2"],
    ["--model_args", "device=cuda:2", "--model_args", '{"pretrained": "p"}'],
])
def test_a_key_is_read_as_lm_eval_merges_it(given):
    merged = _lm_eval_reads(BASE + given).model_args
    for key in ("device", "pretrained"):
        want = None if merged.get(key) is None else str(merged[key])
        assert model_args_value(BASE + given, key) == want, key


def test_invalid_json_is_left_to_lm_eval_to_refuse():
    with pytest.raises(ValueError):
        try_parse_json("{device: cpu}")  # lm-eval refuses it, naming the value
    assert model_args_value(BASE + ["--model_args", "{device: cpu}"], "device") is None


def test_the_fix_is_worded_as_json_only_where_the_last_token_giving_the_key_is_json():
    argv = BASE + ["--model_args", '{"device": "cuda:7"}', "--model_args", "device=cuda:8"]
    assert _lm_eval_reads(argv).model_args["device"] == "cuda:8"  # the key=value token's value is the one used
    assert json_fix(argv, "device", "cpu") is None
    assert json_fix(BASE + ["--model_args", '{"device": "cuda:7"}'], "device", "cpu") is not None


def test_a_device_written_after_a_comma_and_space_is_moved_to_lm_eval_device():
    argv = BASE + ["--model_args", "pretrained=p, device=cpu"]
    assert " device" in _lm_eval_reads(argv).model_args  # lm-eval alone would hand the model a key ' device'
    cfg = _lm_eval_reads(lm_eval_argv(argv))
    assert cfg.device == "cpu" and cfg.model_args == {"pretrained": "p"}


def test_a_token_whose_values_are_all_kept_stays_as_typed():
    argv = BASE + ["--model_args", '{"pretrained":"p","batch_size":2}', "--model_args", "dtype=float32"]
    assert model_args_values_mapped(argv, lambda key, value: value) == argv
