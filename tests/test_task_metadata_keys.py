"""The ``--metadata`` keys of the pack: the registry (``TaskFamily.metadata_keys``) is the one list of what each
task reads, checked against the keys its modules spell; the unknown-key check refuses a key nothing reads (typos of
real keys included) and suggests only keys a task reads."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from torchtune_longshort.eval.tasks import (
    SHARED_KEYS,
    TASK_FAMILIES,
    TEXT_KEYS,
    pack_metadata_keys,
    tasks_path,
    unknown_metadata_keys,
)

# The model keys longshort-eval passes on with the metadata (cli_run.METADATA_ALSO)
ALSO = ("tokenizer", "checkpoint_dir", "pretrained", "lm_eval_model")


@pytest.mark.parametrize("key, meant", [
    ("ppl_num_sample", "ppl_num_samples"),            # accepted before: any key with a family's prefix passed
    ("ppl_max_seq_length", "ppl_max_seq_lengths"),
    ("passkey_depth", "passkey_depths"),
    ("mis_sed", "mis_seed"),
    ("babilong_max_seq_lengths", "max_seq_lengths"),  # read by nothing; the hint suggested it before
    ("bablong_max_seq_lengths", "max_seq_lengths"),
    ("max_seq_length", "max_seq_lengths"),
    ("longbench_e_max_seq_lengths", None),            # LongBench-E takes no lengths
])
def test_a_key_no_task_reads_is_refused_with_a_real_key_as_hint(key, meant):
    bad, why = unknown_metadata_keys({key: "1k"}, also=ALSO)
    assert bad == [key]
    hints = re.findall(r"'([^']+)'", why.split(";")[0])
    assert hints == ([meant] if meant else [])
    assert set(hints) <= set(pack_metadata_keys(ALSO))


def test_every_key_of_the_registry_is_accepted():
    keys = [k for f in TASK_FAMILIES.values() for k in f.metadata_keys] + list(SHARED_KEYS) + list(ALSO)
    assert unknown_metadata_keys(dict.fromkeys(keys, 1), also=ALSO)[0] == []
    for family in TASK_FAMILIES.values():  # the keys whose values are checked, and the data folder, are listed too
        assert {k for k, _ in family.value_kinds} <= set(family.metadata_keys)
        assert not family.data_dir_key or family.data_dir_key in family.metadata_keys


def _spelled(family) -> set:
    """The ``<prefix>_...`` keys a family's modules spell: quoted in its task.py, parameters of a custom_dataset
    function (BABILong, LongBench-E), for the text families long_text's ``f"{prefix}_..."`` keys, and the quoted keys
    of common/suffix_range.py for a task.py that reads it."""
    prefix = family.metadata_prefix
    folder = tasks_path() / family.folder
    text = (folder / "task.py").read_text()
    keys = set(re.findall(rf"[\"']({prefix}_[a-z_]*[a-z])[\"']", text))
    from torchtune_longshort.eval.tasks.babilong.task import load_babilong
    from torchtune_longshort.eval.tasks.longbench_e.task import load_longbench_e

    for loader in (load_babilong, load_longbench_e):
        if Path(inspect.getfile(loader)).parent == folder:
            keys |= {p for p in inspect.signature(loader).parameters if p.startswith(prefix + "_")}
    if "samples_from_metadata" in text:
        long_text = (tasks_path() / "common" / "long_text.py").read_text()
        keys |= {f"{prefix}_{s}" for s in re.findall(r"f[\"']\{prefix\}_([a-z_]+)[\"']", long_text)}
    if "suffix_range" in text:  # the misalignment task's mis_min_frac / mis_max_frac, read there
        keys |= set(re.findall(rf"[\"']({prefix}_[a-z_]*[a-z])[\"']",
                               (tasks_path() / "common" / "suffix_range.py").read_text()))
    if family.length_swept and f"{prefix}_max_seq_lengths" in family.metadata_keys:
        keys.add(f"{prefix}_max_seq_lengths")  # lengths.lengths_from_metadata: lengths_key(prefix)
    return keys


@pytest.mark.parametrize("family", sorted(TASK_FAMILIES))
def test_the_registry_lists_exactly_the_keys_the_task_reads(family):
    fam = TASK_FAMILIES[family]
    assert _spelled(fam) == set(fam.metadata_keys)
    # the settings the eval report compares across runs are keys the task reads, their code defaults among them
    assert fam.measured_by and set(fam.measured_by) <= set(fam.metadata_keys)
    assert {k for k, _ in fam.measured_defaults} <= set(fam.measured_by)


def test_long_text_reads_the_text_keys():
    long_text = (tasks_path() / "common" / "long_text.py").read_text()
    read = set(re.findall(r"f[\"']\{prefix\}_([a-z_]+)[\"']", long_text))
    assert read <= set(TEXT_KEYS) and set(TEXT_KEYS) - read == {"max_seq_lengths", "num_samples"}


def test_the_refusal_lists_the_keys_of_the_runs_own_tasks():
    """The refusal listed every family's keys (one 900-character line for a ppl-only run); it lists those of the
    run's tasks (a group member counts as its family), all of them when no task is named."""
    _, ppl_only = unknown_metadata_keys({"max_seq_length": 1}, also=ALSO, tasks=["longshort_ppl"])
    _, mixed = unknown_metadata_keys({"max_seq_length": 1}, also=ALSO,
                                     tasks=["longshort_babilong_qa1", "longshort_passkey"])
    _, unnamed = unknown_metadata_keys({"max_seq_length": 1}, also=ALSO)
    listed = {text: [f.task for f in TASK_FAMILIES.values() if f"{f.task}: " in text]
              for text in (ppl_only, mixed, unnamed)}
    assert listed == {ppl_only: ["longshort_ppl"], mixed: ["longshort_passkey", "longshort_babilong"],
                      unnamed: [f.task for f in TASK_FAMILIES.values()]}


def test_python_callers_paths_and_one_key_are_read_as_what_they_name(tmp_path, sp_tokenizer_dir):
    """From Python: the model's ``pretrained`` given as a ``Path`` (the models take one) left the pack's tasks
    without a tokenizer ("pass it in --model_args", which the caller had done); a ``Path`` for a data file was
    refused as not a path; one key as a string was split into its characters. The references: the same calls with
    strings."""
    from torchtune_longshort.eval.tasks import check_metadata_values
    from torchtune_longshort.eval.tasks.common.token_sequences import tokenizer_from_metadata

    text = "def f(x):\n    return x"
    assert tokenizer_from_metadata({"pretrained": Path(sp_tokenizer_dir)}).encode(text) == \
        tokenizer_from_metadata({"pretrained": str(sp_tokenizer_dir)}).encode(text)
    doc = tmp_path / "doc.txt"
    doc.write_text(text)
    check_metadata_values({"ppl_data_files": doc, "babilong_data_dir": tmp_path})  # no refusal, as for strings
    assert unknown_metadata_keys("max_seq_length")[0] == unknown_metadata_keys(["max_seq_length"])[0] == \
        ["max_seq_length"]
