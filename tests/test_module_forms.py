"""Every console script (``[project.scripts]`` in pyproject.toml) has its module form in the README, for an install
without scripts on PATH (``pip install --target DIR``): ``python -m MODULE`` runs the script's own ``main``. Read from
the source, not imported (lm-eval's import alone takes seconds): the file python -m runs (``MODULE/__main__.py`` for
a package) defines the script's ``main`` or imports it from the script's module, and calls it under ``if __name__ ==
"__main__":``."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _readme_forms() -> dict:
    text = " ".join((REPO / "README.md").read_text().split())  # a pair broken over two lines reads as one
    return dict(re.findall(r"`(longshort-[a-z-]+)` = `python -m ([\w.]+)`", text))


def _ran_by_python_m(module: str) -> tuple:
    """The module name and file ``python -m module`` runs (a package's ``__main__``, as runpy takes it)."""
    path = REPO.joinpath(*module.split("."))
    if path.is_dir():
        return f"{module}.__main__", path / "__main__.py"
    return module, path.with_suffix(".py")


def test_the_readme_names_a_module_form_for_every_console_script_and_it_runs_that_scripts_main():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    forms = _readme_forms()
    assert sorted(forms) == sorted(scripts)
    for name, module in forms.items():
        run, path = _ran_by_python_m(module)
        target_module, target = scripts[name].split(":")
        body = ast.parse(path.read_text()).body
        if run == target_module:
            assert any(isinstance(n, ast.FunctionDef) and n.name == target for n in body), (name, path)
        else:
            imported = [a.name for n in body if isinstance(n, ast.ImportFrom) and n.module == target_module
                        for a in n.names]
            assert target in imported, (name, path, target_module)
        guard = [n for n in body if isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'"]
        assert guard and f"{target}(" in ast.unparse(guard[-1]), (name, path)
