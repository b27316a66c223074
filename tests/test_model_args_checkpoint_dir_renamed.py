"""``checkpoint_dir=`` of the ``longshort`` model's ``--model_args`` given as ``pretrained=`` in every token that
holds it, so that lm-eval merges them by its own rule (the last one wins): with ``checkpoint_dir`` in two tokens,
the first alone was renamed and the model was handed ``pretrained`` and ``checkpoint_dir`` both, then refused
"pretrained='X' and checkpoint_dir=... name different checkpoints", a ``pretrained`` the user never typed. Checked
against lm-eval's own parse of the same tokens, ``checkpoint_dir`` spelled as ``pretrained``."""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.cli_run import lm_eval_argv

BASE = ["run", "--model", "longshort", "--tasks", "longshort_ppl", "--device", "cpu"]


def _lm_eval_reads(argv):
    from lm_eval._cli.harness import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    return EvaluatorConfig.from_cli(HarnessCLI()._parser.parse_args(argv)).model_args


def _as_pretrained(given):
    """``given`` with ``checkpoint_dir`` spelled ``pretrained`` (no space after a comma): what lm-eval would merge
    had the user typed that."""
    return [t.replace("checkpoint_dir", "pretrained").replace(", ", ",") for t in given]


def _args(*tokens):
    return [a for t in tokens for a in ("--model_args", t)]


@pytest.mark.parametrize("given", [
    _args("checkpoint_dir=/a", "checkpoint_dir=/b"),
    _args('{"checkpoint_dir": "/a"}', "checkpoint_dir=/b"),
    _args("checkpoint_dir=/a", '{"checkpoint_dir": "/b", "dtype": "float32"}'),
    _args("checkpoint_dir=/a,checkpoint_dir=/b"),
    _args("dtype=float32, checkpoint_dir=/b"),  # after a comma and space: lm-eval alone reads ' checkpoint_dir'
])
def test_checkpoint_dir_is_merged_as_lm_eval_merges_pretrained(given):
    want = _lm_eval_reads(BASE + _as_pretrained(given))
    got = _lm_eval_reads(lm_eval_argv(BASE + given))
    assert "checkpoint_dir" not in got and got == want, (got, want)
