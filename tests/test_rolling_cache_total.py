"""``loglikelihood_rolling``'s entry in lm-eval's response cache (``--use_cache``) against the value it returns and
lm-eval's own windows: a text of several ``max_length`` windows (``lm_eval.utils.get_rolling_token_windows``) is
cached as the sum of all its windows' scores, whatever order the windows finish in. Caching the last window's
score alone passed every test (a rerun would have replayed it as the text's log-likelihood)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("lm_eval")

import lm_eval.utils as lm_utils  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402

from torchtune_longshort.eval.model.adapter import LongShortLM  # noqa: E402

MAX_LENGTH = 4


class _Cache:
    def __init__(self):
        self.added = []

    def add_partial(self, kind, args, value):
        self.added.append((kind, args, value))


def _scored_longest_first(windows, disable_tqdm=False, task_names=None, done=None):
    # a stand-in for the scoring: window i scores -(i + 1), reported longest window first (as batches run)
    for i in sorted(range(len(windows)), key=lambda w: -len(windows[w][1])):
        done(i, (-(i + 1.0), False))


def test_a_multi_window_text_is_cached_as_the_sum_of_its_windows():
    texts = [list(range(10, 21)), list(range(30, 33))]  # 11 and 3 tokens: 3 windows and 1 window
    lm = SimpleNamespace(tok_encode=lambda text: list(text), prefix_token_id=1, max_length=MAX_LENGTH,
                         _loglikelihood_tokens=_scored_longest_first, cache_hook=_Cache())
    requests = [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]
    got = LongShortLM.loglikelihood_rolling(lm, requests)
    counts = [len(list(lm_utils.get_rolling_token_windows(t, 1, MAX_LENGTH, 1))) for t in texts]
    assert counts == [3, 1]
    first = [0, counts[0]]
    ref = [-sum(float(first[r] + w + 1) for w in range(counts[r])) for r in range(2)]
    assert got == ref
    assert sorted((args[0][0], value) for _, args, value in lm.cache_hook.added) == sorted(
        (t[0], r) for t, r in zip(texts, ref))
