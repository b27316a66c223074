"""A ``~`` in ``--model_args`` path values is expanded in the items lm-eval itself reads (JSON or ``key=value`` split
at its top-level commas), so that lm-eval's own parse of the expanded value equals its parse of the given one with only
those path values expanded."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("lm_eval")

from lm_eval._cli.utils import key_val_to_dict, try_parse_json  # noqa: E402

from torchtune_longshort.eval.cli_argv import home_expanded  # noqa: E402


def _lm_eval_reads(value: str) -> dict:
    parsed = try_parse_json(value)
    return parsed if isinstance(parsed, dict) else key_val_to_dict(value)


@pytest.mark.parametrize("value, expanded_keys", [
    ('{"pretrained": "~/x", "dtype": "float32"}', ["pretrained"]),
    ("pretrained=~/x,foo=[1,tokenizer=~/t]", ["pretrained"]),  # `tokenizer=~/t` is inside foo's brackets
    ('{"peft": "~/adapter", "gen": {"tokenizer": "~/t"}}', ["peft"]),
    ("dtype=float32,peft=~/adapter,stop=[a,pretrained=~/b]", ["peft"]),
])
@pytest.mark.parametrize("joined", [False, True])
def test_a_tilde_is_expanded_in_the_items_lm_eval_reads_and_nowhere_else(value, expanded_keys, joined):
    out = home_expanded(["run", *(["--model_args=" + value] if joined else ["--model_args", value])])[-1]
    got = _lm_eval_reads(out.partition("--model_args=")[2] if out.startswith("--model_args=") else out)
    want = _lm_eval_reads(value)
    want.update({k: os.path.expanduser(want[k]) for k in expanded_keys})
    assert got == want
