"""What `lm_eval ls tasks --include_path <pack>` prints in its Output Type column for the pack's tasks."""

from __future__ import annotations

from pathlib import Path

import pytest


def _listed_output_type(path: Path) -> str:
    # as lm-eval's TaskManager.list_all_tasks fills the column: the task file read with its includes, functions not
    # resolved
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(path, resolve_func=False, recursive=True).get("output_type", "")


@pytest.mark.parametrize("family", ["babilong", "longbench_e"])
def test_a_pack_task_on_an_lm_eval_base_lists_the_output_type_lm_eval_lists_for_its_base(family):
    """`lm_eval ls tasks --include_path` showed an empty Output Type for longshort_babilong_qa1..5, where lm-eval's
    own babilong_qa1..5 (their lm_eval_base) show generate_until; each pack task now lists what its base lists (an
    empty column for LongBench-E, as lm-eval's own longbench_*_e)."""
    import lm_eval.tasks
    from lm_eval.tasks._yaml_loader import load_yaml

    import torchtune_longshort.eval.tasks as pack

    lm_eval_tasks = Path(lm_eval.tasks.__file__).resolve().parent
    files = sorted((Path(pack.__file__).parent / family).glob("longshort_*.yaml"))
    bases = [(f, load_yaml(f, resolve_func=False).get("lm_eval_base")) for f in files]
    bases = [(f, b) for f, b in bases if b]
    assert len(bases) >= 5
    listed = {f.stem: (_listed_output_type(f), _listed_output_type(lm_eval_tasks / b)) for f, b in bases}
    assert all(ours == theirs for ours, theirs in listed.values()), listed
    if family == "babilong":
        assert {ours for ours, _ in listed.values()} == {"generate_until"}
