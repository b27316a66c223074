"""A file at ``<out>/babilong_data`` in a study's own output folder was not caught up front: both fine-tunes
trained, then each evaluation failed at babilong_data (the generator's '--out=... is a file, not a folder'), the
study exit 1. The study now refuses it before anything runs (exit 2, one line naming the path and the fix), and a
folder where it writes a file (study.json) alike. The references: the generator's own refusal of that --out, and
the study's own write of study.json failing on that folder."""

from __future__ import annotations

import os

import pytest
from study_helpers import CPU_SMALL, ROOT, FakeExecutor

import torchtune_longshort.study.__main__ as study_main
import torchtune_longshort.study.runner as runner
from torchtune_longshort.output_guard import atomic_write_text, check_output_folder
from torchtune_longshort.study.run_configs import STUDY_MARKER


def _refused(tmp_path, monkeypatch, capsys, out):
    calls = FakeExecutor()

    class Recorded(runner.Study):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "executor": calls})

    monkeypatch.setattr(study_main, "Study", Recorded)
    before = sorted(os.listdir(out))
    code = study_main.main(["--config", str(CPU_SMALL), "--quick", "--out", str(out), "--repo-root", str(ROOT)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert calls.calls == [] and sorted(os.listdir(out)) == before  # nothing trained, nothing written
    return err[0]


# runs/<key>: a run's folder replaced by a user's file; before, the pre-flight passed, the run failed at its
# mkdir and its record's write ended the study in a traceback; every run's folder is checked, not the first alone
@pytest.mark.parametrize("name, kind", [("babilong_data", "file"), ("babilong_data", "link to nothing"),
                                        ("runs/clex_a0_s0", "file"), ("runs/clex_a0.3_s0", "link to nothing")])
def test_a_non_folder_at_babilong_data_in_the_studys_own_folder_is_refused_up_front(tmp_path, monkeypatch, capsys,
                                                                                    kind, name):
    out = tmp_path / "q1"
    (out / "runs").mkdir(parents=True)
    (out / STUDY_MARKER).write_text("{}")  # a study's own folder: its names are its to write
    data = out / name
    data.write_text("my notes\n") if kind == "file" else os.symlink(tmp_path / "gone", data)
    with pytest.raises(OSError):  # what the BABILong generation (a run's record) would meet after the fine-tunes
        check_output_folder(data, "--out", [], lambda f: False) if kind == "file" and name == "babilong_data" \
            else data.mkdir(parents=True, exist_ok=True)
    line = _refused(tmp_path, monkeypatch, capsys, out)
    assert f"holds {str(data)!r}, a {kind}, where the study keeps its {name}/ folder" in line, line
    assert "move it away, or name another folder" in line


def test_a_folder_at_study_json_in_the_studys_own_folder_is_refused_up_front(tmp_path, monkeypatch, capsys):
    out = tmp_path / "q1"
    (out / "study.json").mkdir(parents=True)
    (out / STUDY_MARKER).write_text("{}")
    with pytest.raises(OSError):  # the study's write of its summary, after every run
        atomic_write_text(out / "study.json", "{}")
    line = _refused(tmp_path, monkeypatch, capsys, out)
    assert f"holds {str(out / 'study.json')!r}, a folder, where the study writes its file study.json" in line, line
