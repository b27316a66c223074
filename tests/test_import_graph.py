"""The package's import graph (benchmarks/import_graph.py, read with ``ast``): no circle, no arrow back up, every module
on a declared floor, and no function-level import of the project's own modules unless it defers a heavy dependency
that it really defers. The script's own rules are checked on small planted packages whose answers are known."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from benchmarks import import_graph as graph

ROOT = Path(__file__).resolve().parent.parent

@pytest.fixture(scope="module")
def facts():
    return graph.analyse(ROOT)


def test_no_import_circle(facts):
    assert facts["circles_module_level"] == []
    assert facts["circles_all_imports"] == []  # none hidden by a function-level or TYPE_CHECKING import either


def test_no_arrow_back_up_and_every_module_on_a_floor(facts):
    assert facts["unplaced"] == []
    assert facts["arrows_up"] == []


def test_function_level_own_imports_only_defer_a_heavy_dependency(facts):
    undeferred = [f"{row['file']}:{row['line']}" for row in facts["function_level_list"] if not row["deferred"]]
    assert undeferred == [], "move these to module level, or mark a real deferral '# deferred: <package>'"
    assert facts["function_level_false_deferrals"] == []


def _package(root: Path, files: dict) -> Path:
    for name, text in files.items():
        path = root / graph.PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_planted_circles_arrows_and_deferrals_are_found(tmp_path):
    """A planted package: a module-level circle between two study modules, a circle hidden by a function-level
    import, a ground-floor module importing a feature, a type-only import, and deferrals true and false."""
    root = _package(tmp_path, {
        "__init__.py": "",
        "windows.py": "import torch\n",
        "lengths.py": "def f():\n    from torchtune_longshort.eval import x\n",  # floor 0 -> 4, in a function
        "eval/__init__.py": "x = 1\n",
        "rope/__init__.py": "from . import base\n",
        "rope/base.py": "from torchtune_longshort.windows import *\n",
        "loss/__init__.py": textwrap.dedent("""\
            def a():
                from torchtune_longshort.rope import base  # deferred: torch
            def b():
                # deferred: lm_eval
                import torchtune_longshort.windows
            def c():
                from torchtune_longshort import refusals
            """),
        "refusals.py": "",
        "study/__init__.py": "",
        "study/config.py": "from .runner import Study\n",
        "study/runner.py": "from torchtune_longshort.study.config import X\nclass Study: pass\n",
        "study/report.py": "def f():\n    from torchtune_longshort.study.figures import g\n",
        "study/figures.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                            "    from torchtune_longshort.study.report import f\n",
        "study/tables.py": "",
    })
    facts = graph.analyse(root)
    assert facts["circles_module_level"] == [["study.config", "study.runner"]]
    assert sorted(facts["circles_all_imports"]) == [["study.config", "study.runner"],
                                                    ["study.figures", "study.report"]]
    up = {(a["from"], a["to"], a["kind"]) for a in facts["arrows_up"]}
    # config (5.0) -> runner (5.2); lengths (0) -> eval (4), function-level
    assert up == {("study.config", "study.runner", "module"), ("lengths", "eval", "function")}
    rows = {(r["file"].split("/", 1)[1], r["line"]): r for r in facts["function_level_list"]}
    assert rows["loss/__init__.py", 2]["deferred"] == ["torch"] and rows["loss/__init__.py", 2]["deferral_holds"]
    # windows pulls torch, not lm_eval: a false deferral
    assert rows["loss/__init__.py", 5]["deferred"] == ["lm_eval"] and not rows["loss/__init__.py", 5]["deferral_holds"]
    assert rows["loss/__init__.py", 7]["deferred"] == []
    assert facts["function_level_false_deferrals"] == [f"{graph.PACKAGE}/loss/__init__.py:5"]
    assert facts["function_level_imports"] == 5 and facts["function_level_undeferred"] == 3


def test_a_package_init_counts_only_where_python_runs_it(tmp_path):
    """Importing a sibling by its full name does not re-run the own package's ``__init__`` (no circle); importing a
    name from the own package's ``__init__``, which re-exports the importer, is a circle; another package's
    ``__init__`` runs when any of its submodules is imported."""
    root = _package(tmp_path, {
        "__init__.py": "",
        "study/__init__.py": "from torchtune_longshort.study.runner import Study\n",
        "study/runner.py": "from torchtune_longshort.study.config import X\nclass Study: pass\n",
        "study/config.py": "X = 1\n",
        "study/report.py": "from torchtune_longshort.study import Study\n",
        "eval/__init__.py": "from torchtune_longshort.eval.tasks import T\n",
        "eval/tasks.py": "from torchtune_longshort.study.config import X\nT = 1\n",
    })
    facts = graph.analyse(root)
    assert facts["circles_module_level"] == []
    # report imports the study package's __init__, which it would re-enter if __init__ imported report
    (root / graph.PACKAGE / "study/__init__.py").write_text("from torchtune_longshort.study.report import *\n")
    assert graph.analyse(root)["circles_module_level"] == [["study", "study.report"]]
    # eval.tasks -> study.config runs study/__init__ (it holds no eval module): an arrow up from floor 4 to 5.4
    assert ("eval.tasks", "study") in {(a["from"], a["to"]) for a in graph.analyse(root)["arrows_up"]}


def test_the_script_prints_a_table_and_json(tmp_path, capsys):
    root = _package(tmp_path, {"__init__.py": "", "windows.py": "",
                               "rope.py": "from torchtune_longshort import windows\n"})
    assert graph.main(["--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 modules, 1 module-level edges") and "| circles among module-level imports | 0 |" in out
    assert graph.main(["--root", str(root), "--json"]) == 0
    assert '"circles_module_level": []' in capsys.readouterr().out
