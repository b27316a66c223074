"""Each task family's metric names have one owner, the registry (``eval.tasks.TASK_FAMILIES``): every task YAML of
its folder lists exactly those in its ``metric_list`` (groups: in ``aggregate_metric_list``, with their per-length /
per-depth forms), and the study's ``metric_of`` reads the registry instead of a table of its own.

References: the YAML files as lm-eval's own loader reads them (includes resolved), and the names the study's reports
were read under before the study's table went (pinned below)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from lm_eval.tasks._yaml_loader import load_yaml

from torchtune_longshort.eval.tasks import TASK_FAMILIES, tasks_path
from torchtune_longshort.study.eval_config import metric_of


def _declared(family: str):
    fam = TASK_FAMILIES[family]
    return list(fam.metrics) + list(fam.diagnostics)


@pytest.mark.parametrize("family", sorted(TASK_FAMILIES))
def test_every_task_yaml_lists_the_registry_metrics(family):
    declared = _declared(family)
    yamls = sorted((tasks_path() / TASK_FAMILIES[family].folder).glob("*.yaml"))
    assert yamls, family
    for path in yamls:
        cfg = load_yaml(path, resolve_func=False)
        if "group" in cfg:
            names = [m["metric"] for m in cfg["aggregate_metric_list"]]
            forms = re.compile(rf"^({'|'.join(map(re.escape, declared))})(_[0-9]+k?)?(_d[0-9]+)?$")
            assert [n for n in names if not forms.match(n)] == [], path.name
            assert set(declared) <= set(names), path.name
        else:
            assert [m["metric"] for m in cfg["metric_list"]] == declared, path.name


# What the study read before its own table went (study/eval_config.py:_FAMILY_METRIC): name -> (family, metric).
FORMER = {
    "ppl": ("ppl", "ppl_4k"), "misalignment": ("misalignment", "sce_4k"), "jeffreys": ("misalignment", "jeffreys_4k"),
    "passkey": ("passkey", "acc_4k"), "passkey_depth_0": ("passkey", "acc_4k_d0"),
    "passkey_digits": ("passkey", "digits_4k"), "passkey_digits_depth_0": ("passkey", "digits_4k_d0"),
    "babilong": ("babilong", "acc_4k"),
}


@pytest.mark.parametrize("name", sorted(FORMER))
def test_metric_of_names_what_it_named_before(name):
    family, metric = FORMER[name]
    assert metric_of(name, "4k" if name == "babilong" else 4096) == (TASK_FAMILIES[family].task, metric)
    if name == "babilong":
        assert metric_of(name, "1k", depth=50) == (TASK_FAMILIES[family].task, "acc_1k_d50")


def test_the_study_names_are_the_registry_s():
    names = {n: (f, m) for f, fam in TASK_FAMILIES.items() for n, m in fam.study_names}
    assert set(names) == {"ppl", "misalignment", "jeffreys", "passkey", "passkey_digits", "babilong"}
    assert all(m in TASK_FAMILIES[f].metrics for f, m in names.values())


def test_metric_of_reads_the_registry(monkeypatch):
    """A registry that names passkey's study column after another metric moves what the study reads with it."""
    fam = TASK_FAMILIES["passkey"]
    monkeypatch.setitem(TASK_FAMILIES, "passkey", replace(fam, study_names=(("passkey", "digits"),)))
    assert metric_of("passkey", 1024) == (fam.task, "digits_1k")
    assert metric_of("passkey_depth_0", 1024) == (fam.task, "digits_1k_d0")
    with pytest.raises(ValueError, match=r"passkey_digits.*not a study name"):
        metric_of("passkey_digits", 1024)
