"""Two runs given ``--metadata '{"passkey_depths": "0,50,100"}'`` and ``[0, 50, 100]`` (the forms 9559cc2 let every
list-valued key take) ran the same task, yet longshort-eval-report refused them as "the runs differ in
longshort_passkey's passkey_depths (`a` 0,50,100, `b` [0, 50, 100])", and two such results files in one folder as
"mixes results of different runs ... --metadata passkey_depths: '0,50,100' vs [0, 50, 100]" (max_seq_lengths and
mis_divergences alike). The reference: each task's own reader of the value (the passkey task's depths_of,
lengths_from_metadata, divergence_names) given the two results files' metadata: the report refuses a pair exactly
when those readers differ."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.eval.report import build_report

PASSKEY, MIS = "longshort_passkey", "longshort_misalignment"


def _results(path, task, metadata):
    """A results file of one run of ``task`` whose task ran with ``metadata`` over its YAML's (as lm-eval records)."""
    from torchtune_longshort.eval.report.one_run import pack_defaults

    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"results": {task: {"acc,none": 0.5}}, "versions": {task: 3.0}, "n-shot": {task: 0},
            "configs": {task: {"metadata": {**pack_defaults().get(task, {}), **metadata, "pretrained": "/ckpt/a"}}},
            "n-samples": {task: {"original": 2, "effective": 2}},
            "config": {"model": "longshort", "model_args": {"pretrained": "/ckpt/a"}, "limit": None,
                       "model_dtype": "torch.float32", "device": "cpu"}}
    path.write_text(json.dumps(data))
    return data["configs"][task]["metadata"]


def _read(task, metadata):
    """What the task itself runs at, read by its own readers."""
    from torchtune_longshort.eval.tasks.common.divergence_names import divergence_names
    from torchtune_longshort.eval.tasks.common.lengths import lengths_from_metadata
    from torchtune_longshort.eval.tasks.passkey.task import depths_of

    if task == PASSKEY:
        return depths_of(metadata), lengths_from_metadata(metadata, "passkey")
    return divergence_names(metadata.get("mis_divergences", "sce")), lengths_from_metadata(metadata, "mis")


PAIRS = [  # (task, metadata a, metadata b)
    (PASSKEY, {"passkey_depths": "0,50,100"}, {"passkey_depths": [0, 50, 100]}),
    (PASSKEY, {"passkey_depths": " 0, 50 ,100"}, {"passkey_depths": ["0", "50", "100"]}),
    (PASSKEY, {"passkey_depths": "0,25,50,75,100"}, {}),  # the task's default, spelled as a comma list
    (PASSKEY, {"passkey_depths": "0,50"}, {"passkey_depths": [0, 50, 100]}),
    (PASSKEY, {"max_seq_lengths": "256", "passkey_depths": [50]}, {"max_seq_lengths": [256], "passkey_depths": 50}),
    (PASSKEY, {"max_seq_lengths": "1k,2k"}, {"max_seq_lengths": [1024, 2048]}),
    (PASSKEY, {"max_seq_lengths": [2048, 4096, 8192, 16384, 32768]}, {}),  # the YAML's "2k,...,32k"
    (PASSKEY, {"max_seq_lengths": "1k"}, {"max_seq_lengths": 2048}),
    (MIS, {"mis_divergences": "sce,js"}, {"mis_divergences": ["sce", "js"]}),
    (MIS, {"mis_divergences": "sce,js"}, {"mis_divergences": ["js"]}),
]


@pytest.mark.parametrize("task,ma,mb", PAIRS, ids=[f"{t}-{a}-{b}" for t, a, b in PAIRS])
def test_runs_are_refused_exactly_when_their_task_read_other_values(tmp_path, task, ma, mb):
    a, b, one = tmp_path / "a", tmp_path / "b", tmp_path / "one"
    read_a = _read(task, _results(a / "results_2026-01-01T00-00-00.json", task, ma))
    read_b = _read(task, _results(b / "results_2026-01-01T00-00-00.json", task, mb))
    _results(one / "results_2026-01-01T00-00-00.json", task, ma)
    _results(one / "results_2026-01-02T00-00-00.json", task, mb)
    same = read_a == read_b
    measured = "passkey_depths" in {**ma, **mb}  # a measured setting across runs (lengths are the metrics' names)
    for runs, refused_when in (([a, b], not same and measured), ([one], not same)):
        out = tmp_path / ("rep_" + "_".join(r.name for r in runs))
        if refused_when:
            with pytest.raises((ValueError, SystemExit)):
                build_report(runs, out)
        else:
            build_report(runs, out)
            assert (out / "report.md").is_file()
