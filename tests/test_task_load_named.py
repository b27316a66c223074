"""A user task whose documents fail to load is refused naming it (task_faults._loading_named).

Walked: `longshort-eval run ... --include_path mt3 --tasks my_load,longshort_ppl` with my_load's process_docs raising
ValueError('bad docs') ended 'longshort-eval: error: bad docs', exit 2, naming no task; it now says
'my_load: loading the task: ValueError: bad docs (no task ran: ...)', the words task_faults gives a fault later on.
"""

import textwrap

import pytest
from lm_eval.tasks import TaskManager

from torchtune_longshort.eval.task_faults import contained


def _task(folder, name, raise_line):
    folder.mkdir()
    (folder / "rows.jsonl").write_text('{"text": "a", "answer": "b"}\n')
    (folder / "f.py").write_text(f"def docs(ds):\n    {raise_line}\n")
    (folder / f"{name}.yaml").write_text(textwrap.dedent(f"""\
        task: {name}
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {folder / 'rows.jsonl'}
        test_split: test
        output_type: loglikelihood
        doc_to_text: "{{{{text}}}}"
        doc_to_target: " {{{{answer}}}}"
        process_docs: !function f.docs
        metric_list:
          - metric: acc
        """))
    return TaskManager(include_path=str(folder), include_defaults=False)


def _lm_evals_own_error(manager, name):
    with pytest.raises(Exception) as own:  # the reference: lm-eval's own build, unwrapped
        manager.load([name])
    return own.value


def test_a_task_whose_documents_fail_to_load_is_named(tmp_path):
    manager = _task(tmp_path / "mt3", "my_load", "raise ValueError('bad docs')")
    own = _lm_evals_own_error(manager, "my_load")
    with contained(), pytest.raises(ValueError) as named:
        manager.load(["my_load"])
    line = str(named.value)
    assert "\n" not in line
    assert line.startswith(f"my_load: loading the task: {type(own).__name__}: {own}")
    assert "leave my_load out of --tasks" in line
    with pytest.raises(type(own)) as after:  # the wrap is gone when the run is
        manager.load(["my_load"])
    assert str(after.value) == str(own)


def test_an_error_that_names_the_task_already_is_kept(tmp_path):
    manager = _task(tmp_path / "mt4", "my_said", "raise ValueError('my_said: its data folder is empty')")
    own = _lm_evals_own_error(manager, "my_said")
    with contained(), pytest.raises(ValueError) as kept:
        manager.load(["my_said"])
    assert str(kept.value) == str(own)
