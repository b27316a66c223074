"""A task of one's own built from the pack's functions (docs/eval.md's my_ppl, --include_path) had its unscored
rows' reason name the pack's task the function serves: "longshort_ppl at length 256: ...". The reason
now names the task that ran (my_ppl)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

pytest.importorskip("lm_eval")

DOCS = Path(__file__).resolve().parents[1] / "docs" / "eval.md"


def _docs_yaml() -> str:
    """docs/eval.md's my_ppl.yaml, as written there ("A task of your own")."""
    return DOCS.read_text().split("### A task of your own", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]


def test_an_own_tasks_unscored_reason_names_that_task(tmp_path):
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.tasks import TaskManager
    from pack_helpers import TextLM

    data = tmp_path / "corpus.txt"
    data.write_text("A document.\n")
    text = _docs_yaml().replace("/data/my_corpus/*.txt", str(data)).replace('"1k"', '"256"')
    assert yaml.safe_load(text.split("class:", 1)[0])["task"] == "my_ppl"  # the reference: the YAML's task name
    (tmp_path / "mytasks").mkdir()
    (tmp_path / "mytasks" / "my_ppl.yaml").write_text(text)
    # no tokenizer given (the stand-in model has none): each length unscored, with the reason
    tm = TaskManager(include_path=str(tmp_path / "mytasks"), include_defaults=False)
    res = simple_evaluate(model=TextLM(), tasks=["my_ppl"], task_manager=tm, bootstrap_iters=0)
    assert math.isnan(res["results"]["my_ppl"]["ppl_256,none"])
    (reason,) = res["configs"]["my_ppl"]["not_scored"]
    assert reason.startswith("my_ppl at length 256: this task sizes its samples in tokens and needs the model's "
                             "tokenizer"), reason
