"""Four messages a user meets at run time ended by pointing at a file of the project's docs/ folder, which a wheel's
user does not have: --apply_chat_template ignored by a task that sizes its input ('(docs/eval.md)') or by a LongBench
task whose prompt goes without a chat template ('(docs/longbench_babilong.md)'), --metadata babilong_prompt's
refusal ('...; docs/longbench_babilong.md)') and the synthetic CLI's refusal of a paper-figure flag with the beyond
figures ('(docs/synthetic/README.md)'). Each says its fact itself; the installed package's own files (no docs/ in
it) are the reference."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import torchtune_longshort
from torchtune_longshort.eval.tasks import VALUE_KINDS
from torchtune_longshort.eval.tasks.common.pack_task import PackTask
from torchtune_longshort.synthetic.cli_flags import check_beyond_flags

# a docs/ file named by its path, unless as the project's (README's words for the checkout's docs)
DOCS_FILE = re.compile(r"(?<!project's )\bdocs/[\w/]*\.md")


def _task(name: str, no_chat_template=None):
    return SimpleNamespace(config=SimpleNamespace(task=name, num_fewshot=None), no_chat_template=no_chat_template,
                           set_config=lambda **kw: None)


def _warnings(caplog, task, **kwargs):
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        PackTask._without_fixed_context(task, {"apply_chat_template": True, **kwargs})
    return [r.getMessage() for r in caplog.records]


def test_the_runtime_messages_name_no_docs_file_a_wheel_lacks(caplog):
    assert not (Path(torchtune_longshort.__file__).parent / "docs").exists()  # what a wheel's user holds
    said = _warnings(caplog, _task("longshort_ppl"))
    assert said and all("the option would put text before it" in m for m in said), said
    said += (lines := _warnings(caplog, _task("longshort_longbench_trec_e", "LongBench's pred.py sends trec's "
                                              "prompt without the model's chat template")))
    assert any("sends trec's prompt without the model's chat template" in m for m in lines), lines
    said.append(VALUE_KINDS["prompt style"][1])
    with pytest.raises(ValueError) as e:
        check_beyond_flags(["--figure", "beyond", "--steps", "1"])
    said.append(str(e.value))
    assert "which fix their own runs" in said[-1]
    assert [m for m in said if DOCS_FILE.search(m)] == []
