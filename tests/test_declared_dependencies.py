"""Every third-party package the installed package imports is declared in ``pyproject.toml``.

A wheel user gets only what ``dependencies`` (and the extra they asked for) pulls: a package imported here but pulled
only through another package's requirements breaks as soon as that package drops it. The reference is the package's
own source (every ``import`` statement, read with ``ast``) against the distributions ``importlib.metadata`` maps each
top-level module to.
"""
import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imported_top_level_modules():
    modules = {}
    for path in (ROOT / "torchtune_longshort").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                modules.setdefault(name.split(".")[0], path.relative_to(ROOT))
    return {m: p for m, p in modules.items() if m not in sys.stdlib_module_names and m != "torchtune_longshort"}


def test_every_imported_package_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {_requirement_name(r) for r in project["dependencies"]}
    optional = {_requirement_name(r) for r in project["optional-dependencies"]["gguf"]}
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(_imported_top_level_modules().items()):
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not names & (declared | optional):
            missing.append(f"{module} (imported in {where}; distribution {sorted(names)})")
    assert not missing, "imported but not declared in pyproject.toml's dependencies: " + "; ".join(missing)


def test_requirement_names_are_read_as_pip_does():
    # the parser above must not accept a name it cannot split, or the test could never fail
    assert _requirement_name("lm-eval[hf,longbench]==0.4.13") == "lm-eval"
    assert _requirement_name("torchao>=0.14.1,<0.15") == "torchao"
    assert _requirement_name("PyYAML") == "pyyaml"
