"""A torn JSON line in a local folder read through ``datasets`` (``hf_text``; the evaluation's ``<prefix>_source:
hf``) stops datasets' parser, which no skipping reaches: the reason says which skipping does not reach it in the
caller's own key. Before, it said "(skip_bad_records does not reach it)", the training component's argument, to an
evaluation user whose key is ``ppl_skip_bad_records`` and a recipe user whose is ``validation.dataset....``. The
reference: ``json.loads`` refuses the line, and the key the reason names, turned on, is still refused."""

from __future__ import annotations

import json
import re

import pytest

from torchtune_longshort.data import corpus
from torchtune_longshort.data.source_names import SourceNames, source_names
from torchtune_longshort.data.text_files import DataRecordError
from torchtune_longshort.eval.tasks.common.long_text import texts_from_metadata
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

TORN = '{"text": "torn'


@pytest.fixture
def corp(tmp_path):
    lines = [json.dumps({"text": f"book {i} " * 8}) for i in range(3)] + [TORN]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(json.JSONDecodeError):
        json.loads(TORN)
    return tmp_path


def _not_reached(said):
    return re.search(r"datasets' parser stops at it \((\S+)(?: in --metadata)? does not reach it\)", said).group(1)


@pytest.mark.parametrize("prefix", ["ppl", "mis"])
def test_the_evaluation_names_its_own_skip_key(corp, prefix):
    meta = {f"{prefix}_source": "hf", f"{prefix}_dataset_path": str(corp), f"{prefix}_split": "train"}
    with pytest.raises(TaskDataError) as refused:
        list(texts_from_metadata(meta, prefix))
    key = _not_reached(str(refused.value))
    assert key == f"{prefix}_skip_bad_records", str(refused.value)
    with pytest.raises(TaskDataError, match="a.jsonl:4: not a JSON line"):  # turned on, it does not reach the line
        list(texts_from_metadata({**meta, key: True}, prefix))


@pytest.mark.parametrize("section", ["dataset", "validation.dataset"])
def test_the_recipe_names_the_section_s_skip_key(corp, section):
    def read(**kw):
        with source_names(SourceNames(section)):
            return list(corpus.hf_text("json", data_files=str(corp / "a.jsonl"), check_first=False, **kw)())

    with pytest.raises(DataRecordError) as refused:
        read()
    key = _not_reached(str(refused.value))
    assert key == f"{section}.skip_bad_records", str(refused.value)
    with pytest.raises(DataRecordError, match="a.jsonl:4: not a JSON line"):
        read(skip_bad_records=True)
