"""Table 1 run with a shipped config's name (`--config study/table1_smollm2.yaml`, as an installed wheel is run):
its report's command showed the config as the file's absolute path in the package (site-packages from a wheel),
not what the user typed. The reference: the typed arguments, joined by shlex.join."""

from __future__ import annotations

import shlex

import pytest

import torchtune_longshort.study.table1.__main__ as table1_main
from torchtune_longshort.study.table1.__main__ import PROG, main
from torchtune_longshort.study.table1.runner import TABLE1_MARKER


class _Built(Exception):
    pass


def test_the_reports_command_is_the_command_as_typed(tmp_path, monkeypatch):
    def build(*args, command="", **kwargs):
        raise _Built(command)

    monkeypatch.setattr(table1_main, "build_table1_report", build)  # the name main calls
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / TABLE1_MARKER).write_text("made by torchtune_longshort's Table 1\n")
    typed = ["--config", "study/table1_smollm2.yaml", "--quick"]
    with pytest.raises(_Built) as e:
        main([*typed, "--out", str(tmp_path / "out"), "--report-only", "--repo-root", str(tmp_path)])
    assert str(e.value) == shlex.join(PROG.split() + typed), e.value
