"""Hand-made lm-eval results folders for the report's tests."""

from __future__ import annotations

import json


def lm_eval_run(d, samples, limit=None, pretrained="/ckpt/a", model="longshort", reasons=None,
                name="longshort_ppl",
                dtype="torch.float32"):
    """A results folder ``d`` of one run of task ``name`` at 128 tokens: ``samples`` documents (20 under a
    ``limit``), lm-eval 0.4.13's ``config`` keys, the reasons a task records for what it did not score."""
    d.mkdir(parents=True)
    data = {"results": {name: {"ppl_128,none": 3.0 if limit is None else 2.5}},
            "n-samples": {name: {"original": samples if limit is None else 20, "effective": samples}},
            "configs": {name: {"not_scored": reasons or {}}},
            "config": {"model": model, "model_args": {"pretrained": pretrained}, "limit": limit, "model_dtype": dtype,
                       "device": "cpu"}}
    (d / "results_2026-01-01T00-00-00.json").write_text(json.dumps(data))
    return d
