"""Which ``--metadata`` keys a pack task reads, as the report compares two results files (mutants21: two mutants of
``eval/report/one_run._reads`` passed the report's tests). A key given to one run only is a difference when a task
of the other run reads it and ran at another value; a key no task of the other run reads is none. References: each
family's own declared ``metadata_keys`` (all ``<prefix>_...``) and ``length_swept``, read from the registry."""

from __future__ import annotations

import pytest
from lm_eval.utils import handle_arg_string

from torchtune_longshort.eval.report.one_run import settings_differences
from torchtune_longshort.eval.tasks import TASK_FAMILIES


def _results(task, metadata):
    return {"config": {"limit": None}, "results": {task: {}}, "configs": {task: {"metadata": metadata}}}


def test_a_key_that_only_begins_with_a_prefix_is_not_that_tasks():
    fam = TASK_FAMILIES["misalignment"]
    assert all(k.startswith(fam.metadata_prefix + "_") for k in fam.metadata_keys)  # "mis_...", never "mis..."
    key = fam.metadata_prefix + "sion"  # "mission": another task's key, no key of misalignment's
    a, b = _results(fam.task, {key: "x"}), _results(fam.task, {})
    assert settings_differences(a, b) == []
    own = fam.metadata_prefix + "_seed"  # the task's own key, given to one run only: a difference
    assert own in fam.metadata_keys
    assert settings_differences(_results(fam.task, {own: 7}), b) != []


def test_max_seq_lengths_is_no_key_of_a_task_not_swept_by_length():
    fam = TASK_FAMILIES["longbench_e"]
    assert not fam.length_swept
    a, b = _results(fam.task, {"max_seq_lengths": [4096]}), _results(fam.task, {})
    assert settings_differences(a, b) == []


def test_batch_size_and_device_are_no_part_of_a_runs_identity():
    # run_identity's docstring: model_args with "batch size and device left out"; mutants21: keeping batch_size in
    # passed the report's tests, and a task rerun with another --batch_size into the same folder was a second run
    from torchtune_longshort.eval.report.one_run import run_identity

    def ident(**extra):
        return run_identity({"config": {"model": "hf", "model_args": {"pretrained": "/ck", **extra}}})

    assert ident(batch_size=1) == ident(batch_size=8) == ident(max_batch_size=64) == ident(device="cuda:0")
    assert ident(batch_size=1) != ident(revision="v2")  # another model argument is another run


@pytest.mark.parametrize("key, written", [("passkey_seed", "3"), ("passkey_seed", "0"), ("passkey_num_samples", "8"),
                                          ("mis_min_frac", "0.5"), ("ppl_join_documents", "True"),
                                          ("ppl_skip_bad_records", "false")])
def test_a_value_written_as_text_is_the_value_key_value_metadata_gives(key, written):
    # a JSON --metadata '{"passkey_seed": "3"}' and --metadata passkey_seed=3 (which lm-eval types with its own
    # handle_arg_string: 3) are one setting, the tasks reading both alike; the report said "passkey_seed: '3' vs 3"
    fam = next(f for f in TASK_FAMILIES.values() if key in f.metadata_keys)
    typed = handle_arg_string(written)
    assert not isinstance(typed, str)
    assert settings_differences(_results(fam.task, {key: written}), _results(fam.task, {key: typed})) == []
    other = not typed if isinstance(typed, bool) else typed + 1
    assert settings_differences(_results(fam.task, {key: written}), _results(fam.task, {key: other})) != []


@pytest.mark.parametrize("written", ["+-3", "--3", "²"])
def test_text_that_lm_eval_keeps_as_text_is_compared_as_text(written):
    # '+-3' passed _as_typed's own sign-and-digits test and int('+-3') raised ValueError: the report stopped with a
    # traceback; lm-eval's handle_arg_string keeps such text as text, and so is it compared
    fam = next(f for f in TASK_FAMILIES.values() if "passkey_seed" in f.metadata_keys)
    assert handle_arg_string(written) == written
    assert settings_differences(_results(fam.task, {"passkey_seed": written}),
                                _results(fam.task, {"passkey_seed": written})) == []
    assert settings_differences(_results(fam.task, {"passkey_seed": written}),
                                _results(fam.task, {"passkey_seed": 3})) != []
