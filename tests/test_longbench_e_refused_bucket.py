"""A LongBench-E prompt the model refused is NaN in its length bucket too, not only in the pooled score.

A hand mutant of longbench_e.task.process_results leaving the bucket key out of a refused sample's results survived
test_longbench_e and test_longbench_e_bad_lines (mutants11): lm-eval's mean of score_8k_plus then left the refused
sample out, and the bucket read as if every one of its prompts was scored. The reference: the keys of the same sample
answered (LongBench-E's scorer_e puts each sample in one bucket).
"""

from __future__ import annotations

import math

import pytest

from torchtune_longshort.eval.tasks.common.unavailable import RefusedText
from torchtune_longshort.eval.tasks.longbench_e.task import process_results


@pytest.mark.parametrize("length, bucket", [(10, "score_0_4k"), (5000, "score_4_8k"), (9000, "score_8k_plus")])
def test_a_refused_prompt_is_nan_in_its_bucket(length, bucket):
    doc = {"dataset": "passage_count_e", "answers": ["3"], "length": length, "all_classes": None}
    answered = process_results(doc, ["3"])
    refused = process_results(doc, [RefusedText("longer than the model")])
    assert set(answered) == {"score", bucket}
    assert set(answered) <= set(refused) and all(math.isnan(refused[k]) for k in answered)
