"""LongBench-E scores on predictions at the edges of LongBench's own line selection and answer loop.

Hand mutants of ``longbench_e.task`` survived test_longbench_e's fixed predictions (mutants27): the code line picked
with ``splitlines()`` or with ``/`` / a triple backtick / a leading ``#`` as the filter, the whole prediction kept
when no line qualifies, the line stripped before the ratio; the few-shot first line taken after ``lstrip()`` or
``strip()`` instead of ``lstrip('\\n')``; only the first of several answers scored. Each case below tells the
official scorer from one of them. The reference is written from LongBench's ``metrics.py`` (``code_sim_score``) and
``eval.py`` (``scorer_e``'s loop) of THUDM/LongBench, with fuzzywuzzy's own ``fuzz.ratio`` and the qa F1 written
out (normalisation: lower case, punctuation, articles, white space).
"""

from __future__ import annotations

import re
import string
from collections import Counter

import pytest

from torchtune_longshort.eval.tasks.longbench_e.task import score_prediction


def ref_code_sim(prediction, ground_truth):
    from fuzzywuzzy import fuzz

    line = ""
    for candidate in prediction.lstrip("\n").split("\n"):
        if ("`" not in candidate) and ("#" not in candidate) and ("//" not in candidate):
            line = candidate
            break
    return fuzz.ratio(line, ground_truth) / 100


def ref_qa_f1(prediction, ground_truth):
    def norm(s):
        s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
        return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())

    p, g = norm(prediction).split(), norm(ground_truth).split()
    same = sum((Counter(p) & Counter(g)).values())
    return 0.0 if same == 0 else 2 * same / (len(p) + len(g))


def ref_score(dataset, prediction, answers):
    """scorer_e's body for one sample: the few-shot first line, then the max over the answers."""
    if dataset in ("trec", "triviaqa", "samsum", "lsht"):
        prediction = prediction.lstrip("\n").split("\n")[0]
    metric = ref_code_sim if dataset in ("lcc", "repobench-p") else ref_qa_f1
    return max([0.0] + [metric(prediction, gt) for gt in answers])


CODE = [
    ("a = 1\r\nb = 2", "a = 1"),                # a line keeps its "\r": split("\n"), not splitlines()
    ("// TODO: return x", "return x"),          # no line qualifies: the empty string is scored, not the prediction
    ("total = a / b", "total = a / b"),         # one slash is code; only "//" marks a comment
    ("print(`x`)\nfoo()", "foo()"),             # any backtick skips the line, not only a fence
    ("x = 1  # note\ny = 2", "y = 2"),          # a "#" anywhere in the line skips it
    ("    return x", "return x"),               # the line's indent is compared as it is
]


@pytest.mark.parametrize("prediction, answer", CODE)
def test_code_line_selection_is_longbenchs(prediction, answer):
    want = ref_code_sim(prediction, answer)
    assert score_prediction("lcc_e", prediction, [answer], None) == pytest.approx(want, abs=1e-12)
    assert score_prediction("repobench-p_e", prediction, [answer], None) == pytest.approx(want, abs=1e-12)


def test_code_cases_are_not_trivial():
    # each case scores strictly between 0 and 1 or exactly 0/1 as LongBench gives it: not all the same value
    assert len({round(ref_code_sim(p, a), 6) for p, a in CODE}) >= 3


def test_fewshot_first_line_after_leading_newlines_only():
    # LongBench strips "\n" only: a first line of spaces is the answer (F1 0), not the "Paris" after it
    for prediction in (" \nParis", "\n \nParis", "\t\nParis"):
        assert ref_score("triviaqa", prediction, ["Paris"]) == 0.0
        assert score_prediction("triviaqa_e", prediction, ["Paris"], None) == 0.0
    assert score_prediction("triviaqa_e", "\n\nParis\nQuestion: x", ["Paris"], None) == 1.0


def test_the_best_of_several_answers_counts():
    answers = ["AD 1066", "1066"]  # the second matches exactly
    assert ref_score("triviaqa", "1066", answers) == 1.0 > ref_qa_f1("1066", answers[0])
    assert score_prediction("triviaqa_e", "1066", answers, None) == 1.0
    assert score_prediction("qasper_e", "1066", answers, None) == 1.0
