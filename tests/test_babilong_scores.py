"""BABILong's scores (``eval.tasks.babilong.task.process_results``) when the model refused a prompt."""

from __future__ import annotations

import math

from torchtune_longshort.eval.tasks.babilong import task as bl
from torchtune_longshort.eval.tasks.common.unavailable import RefusedText


def _docs():
    label = sorted(bl.TASK_LABELS["qa2"])[0]
    return [{"input": "...", "question": "Where is the football?", "target": label, "qa": "qa2", "length": length,
             "depth": depth, bl.MISSING_DATA_FIELD: ""}
            for length in ("1k", "4k") for depth in (0, 50) for _ in range(3)]


def test_a_refused_prompt_is_nan_at_its_length_and_leaves_acc_to_the_scored_ones():
    """One prompt the model refused (longer than its max_length) made the task's ``acc`` NaN, and with it the group
    mean, though every other sample was scored; now it is NaN at its length only, as in ``longshort_passkey``.
    Reference: the mean of the scored samples' answers, aggregated as lm-eval does (a plain mean per metric)."""
    docs = _docs()
    refused = [d["length"] == "4k" and i % 2 == 1 for i, d in enumerate(docs)]
    right = [i % 3 != 0 for i in range(len(docs))]
    outs = [bl.process_results(d, [RefusedText("prompt of 4,200 tokens > max_length 4096")] if no
                               else [d["target"] if ok else "nothing"])
            for d, no, ok in zip(docs, refused, right)]
    per_metric = {}
    for out in outs:
        for k, v in out.items():
            per_metric.setdefault(k, []).append(v)
    mean = {k: sum(v) / len(v) for k, v in per_metric.items() if k != "error"}
    scored = [float(ok) for no, ok in zip(refused, right) if not no]
    assert math.isclose(mean["acc"], sum(scored) / len(scored)) and math.isnan(mean["acc_4k"])
    assert not math.isnan(mean["acc_1k"]) and not math.isnan(mean["acc_d0"]) and not math.isnan(mean["acc_d50"])
    assert math.isnan(mean["acc_4k_d0"]) and math.isnan(mean["acc_4k_d50"]) and not math.isnan(mean["acc_1k_d0"])
    refused_outs = [o for o in outs if "error" in o]
    assert refused_outs and all("acc" not in o and set(o) <= set(bl.metric_names()) | {"error"} for o in refused_outs)
