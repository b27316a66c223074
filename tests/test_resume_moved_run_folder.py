"""Two hand mutants of training/resume's comparison survived test_resume_policy, test_resume_refusal_names,
test_resume_trust_keys and test_resume_advice_once (mutants16): paths inside the run's output_dir compared as they
are (a run folder moved as a whole refused on resume: its data file 'changed' from /a/run/d.txt to /b/run/d.txt), and
a path beside it that shares its name's start (/a/run2 beside /a/run) taken for one inside it (data read from another
folder resumed without a word). The reference: os.path.commonpath, whether the path lies inside the output_dir."""

from __future__ import annotations

import os

import pytest

from torchtune_longshort.training.resume import compare_resume_config


def _config(out, data):
    return {"output_dir": out, "seq_len": 64, "max_steps": 2,
            "dataset": {"_component_": "torchtune_longshort.data.corpus.local_text", "path": data}}


@pytest.mark.parametrize("name", ["run/d.txt", "run2/d.txt"])
def test_a_run_folder_moved_whole_resumes_and_data_beside_it_is_compared(tmp_path, name):
    saved = _config(str(tmp_path / "a" / "run"), str(tmp_path / "a" / name))
    new = _config(str(tmp_path / "b" / "run"), str(tmp_path / "b" / name))
    inside = os.path.commonpath([saved["output_dir"], saved["dataset"]["path"]]) == saved["output_dir"]
    if inside:  # the same file of the moved run's folder
        assert compare_resume_config(saved, new) == []
    else:  # another folder's file
        with pytest.raises(ValueError, match=r"dataset\.path: "):
            compare_resume_config(saved, new)
