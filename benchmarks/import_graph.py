"""The package's own import graph, read with ``ast`` (nothing is imported): circles, arrows back up, deferred imports.

Usage::

    python benchmarks/import_graph.py            # the table
    python benchmarks/import_graph.py --list     # also every function-level own import, file:line
    python benchmarks/import_graph.py --json     # the same facts as one JSON object
    python benchmarks/import_graph.py --root DIR # another checkout (e.g. `git archive HEAD` unpacked)

What it reads. Every ``torchtune_longshort/**/*.py``; a package's ``__init__.py`` is the package's own module. An
import is *module-level* when it runs on import of the file (top level, class bodies, ``try`` / ``if`` blocks at top
level), *function-level* when it sits inside a ``def``, and *type-only* under ``if TYPE_CHECKING:`` (never run).
Relative imports are resolved against the file's package. ``from P import x`` is an edge to ``P.x`` when ``P.x`` is
a module, else to ``P``. Only the project's own modules count; ``import torch`` is no edge.

Package ``__init__`` counts honestly. Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so an
edge to ``a.b.c`` is also an edge to each package above it, except the packages that hold the importing file itself:
Python is already running those when the file is imported (``study/runner.py`` importing ``study.config`` does not
re-enter ``study/__init__``). An ``__init__`` that re-exports from its submodules has the edges of those imports, so a
submodule importing a name from its own package's ``__init__`` (``from torchtune_longshort.study import X`` in a
study module) closes a circle and is counted.

Circles: strongly connected components of more than one module, (a) in the graph of module-level imports (what
Python must resolve on import) and (b) in the graph of all imports, function-level and type-only included: a circle
only in (b) is one that a function-level or ``TYPE_CHECKING`` import hides. Both must be empty.

Floors: a declared table (``FLOORS`` in benchmarks/import_layers.py), not a module's layer in the import DAG, which puts
every importer above what it imports by construction and so could never show an arrow running back up. The table is the
layering the project declares (DESIGN.md: features at the top, kits at the bottom) and says where a new module belongs;
a module no key matches is *unplaced* (study modules are listed one by one). The study is the pipeline config -> plan ->
run -> collect -> report and figures (floors 5.0 .. 5.4), each stage importing only those before it. An *arrow up* is
any import (module-level, function-level or type-only) to a module on a higher floor; within a floor is allowed.

Deferred imports. A function-level import of the project's own module is kept only where it defers a heavy
optional dependency, and says which: ``# deferred: <package> (why)`` at the end of the import's first line or in the
comment lines right above it, where it covers the run of consecutive imports below (blank lines allowed)::

    def _evaluate(args):
        # deferred: torch, lm_eval (tasks-path answers without them)
        import torchtune_longshort.eval.model.adapter
        from torchtune_longshort.eval import cli_messages

The script checks the claim: the imported module must pull one of the named packages in at module level (itself or
through the own modules it imports, packages' ``__init__`` included) while the importing module does not; else the
deferral is *false*. Any other function-level own import is *undeferred*. tests/test_import_graph.py asserts 0
circles of either kind, 0 arrows up, 0 unplaced modules, 0 false and 0 undeferred function-level own imports.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from import_layers import PACKAGE, floor_of, short  # noqa: E402  (the sibling module: the layering)

MODULE, FUNCTION, TYPE_ONLY = "module", "function", "type-only"
# Outside packages that cost seconds to import (torch ~2-6 s here); --list shows which a function-level import adds.
HEAVY = ("torch", "torchtune", "torchao", "transformers", "peft", "lm_eval", "datasets", "matplotlib", "scipy")

DEFERRED = re.compile(r"#\s*deferred:\s*([^(\n]*)")


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module (own package)
    line: int
    kind: str  # MODULE, FUNCTION or TYPE_ONLY
    deferred: Tuple[str, ...]  # function-level: the dependencies its '# deferred: ...' comment names (none: ())
    implicit: bool  # a package __init__ run because a submodule of it was imported


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def discover(root: Path) -> Dict[str, Path]:
    """Module name -> file, for every .py file of the package under ``root``."""
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk_imports(node: ast.AST, kind: str = MODULE) -> Iterator[Tuple[ast.stmt, str]]:
    """Yields (import statement, kind) for every import under ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, kind
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk_imports(ast.Module([stmt], []), TYPE_ONLY)
            for stmt in child.orelse:
                yield from _walk_imports(ast.Module([stmt], []), kind)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _walk_imports(child, TYPE_ONLY if kind == TYPE_ONLY else FUNCTION)
        else:
            yield from _walk_imports(child, kind)


def _resolve(stmt: ast.stmt, source: str, is_package: bool, modules: Set[str]) -> List[str]:
    """The own modules one import statement names (before adding the packages above them)."""
    if isinstance(stmt, ast.Import):
        return sorted({alias.name for alias in stmt.names if alias.name in modules})
    if stmt.level:
        base = source.split(".") if is_package else source.split(".")[:-1]
        base = base[: len(base) - (stmt.level - 1)]
        target = ".".join(base + ([stmt.module] if stmt.module else []))
    else:
        target = stmt.module or ""
    if target not in modules:
        return []
    return sorted({f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in stmt.names})


def _comment_names(lines: List[str], lineno: int) -> Tuple[str, ...]:
    """The dependencies a ``# deferred: ...`` comment names for the import starting on line ``lineno`` (1-based):
    at the end of that line or in the comment lines right above it; () when there is none."""
    found = [DEFERRED.search(lines[lineno - 1])]
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        found.append(DEFERRED.search(lines[i]))
        i -= 1
    return tuple(name for m in found if m for name in re.findall(r"[A-Za-z_][\w.]*", m.group(1)))


def _deferred_marks(tree: ast.AST, lines: List[str]) -> Dict[int, Tuple[str, ...]]:
    """``id(import statement) -> the dependencies its deferral names``. Consecutive import statements of one body
    (blank lines and comments between them allowed, no other statement) form a run; a comment covers its statement
    and the rest of the run, so one comment above a block of imports marks the block."""
    marks: Dict[int, Tuple[str, ...]] = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            inherited: Tuple[str, ...] = ()
            for stmt in body:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    inherited = _comment_names(lines, stmt.lineno) or inherited
                    marks[id(stmt)] = inherited
                else:
                    inherited = ()
    return marks


def _external(stmt: ast.stmt) -> Set[str]:
    """The top-level names of the packages outside this one that an import statement imports (stdlib included)."""
    if isinstance(stmt, ast.Import):
        return {a.name.split(".")[0] for a in stmt.names} - {PACKAGE}
    return set() if stmt.level or not stmt.module or stmt.module.split(".")[0] == PACKAGE else {
        stmt.module.split(".")[0]}


def _ancestors(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def collect_edges(root: Path = ROOT) -> Tuple[Dict[str, Path], List[Edge], Dict[str, Set[str]]]:
    """Every module of the package under ``root``, every edge between them, and per module the packages outside
    this one that it imports at module level."""
    files = discover(root)
    modules = set(files)
    edges: List[Edge] = []
    external: Dict[str, Set[str]] = {m: set() for m in files}
    for source, path in files.items():
        text = path.read_text()
        lines = text.splitlines()
        is_package = path.name == "__init__.py"
        own_packages = set(_ancestors(source)) | ({source} if is_package else set())
        tree = ast.parse(text, str(path))
        marked = _deferred_marks(tree, lines)
        for stmt, kind in _walk_imports(tree):
            deferred = marked[id(stmt)] if kind == FUNCTION else ()
            if kind == MODULE:
                external[source] |= _external(stmt)
            for target in _resolve(stmt, source, is_package, modules):
                if target != source:
                    edges.append(Edge(source, target, stmt.lineno, kind, deferred, False))
                for package in _ancestors(target):
                    if package not in own_packages and package != source:
                        edges.append(Edge(source, package, stmt.lineno, kind, deferred, True))
    return files, edges, external


def pulled_in(module: str, graph: Dict[str, Set[str]], external: Dict[str, Set[str]]) -> Set[str]:
    """The outside packages that importing ``module`` imports: its own module-level ones and those of every own
    module it imports at module level, transitively (packages' ``__init__`` included)."""
    seen, todo, found = {module}, [module], set()
    while todo:
        m = todo.pop()
        found |= external.get(m, set())
        for t in graph.get(m, ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return found


def strongly_connected(nodes: List[str], graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Tarjan's algorithm (iterative); the components of more than one module, each sorted, largest first."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    for start in nodes:
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(graph.get(start, ()))))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def analyse(root: Path = ROOT) -> dict:
    """The facts the table prints (see the module docstring)."""
    files, edges, external = collect_edges(root)
    nodes = sorted(files)
    module_graph: Dict[str, Set[str]] = {}
    all_graph: Dict[str, Set[str]] = {}
    for edge in edges:
        all_graph.setdefault(edge.source, set()).add(edge.target)
        if edge.kind == MODULE:
            module_graph.setdefault(edge.source, set()).add(edge.target)
    rel = lambda m: str(files[m].relative_to(root))  # noqa: E731
    # function-level own imports, one per import statement (a statement naming two modules is one import)
    statements: Dict[Tuple[str, int], List[Edge]] = {}
    for edge in edges:
        if edge.kind == FUNCTION:  # implicit edges too: the packages above a target run their __init__ first
            statements.setdefault((edge.source, edge.line), []).append(edge)
    per_file: Dict[str, Dict[str, int]] = {}
    listing = []
    for (source, line), group in sorted(statements.items()):
        named = group[0].deferred
        # what the import brings that the importing module does not already import at module level
        # (importing the module runs the __init__ of each package above it first)
        pulls = set().union(*(pulled_in(e.target, module_graph, external) for e in group)) - set().union(
            *(pulled_in(m, module_graph, external) for m in [source] + _ancestors(source)))
        row = per_file.setdefault(rel(source), {"imports": 0, "deferred": 0})
        row["imports"] += 1
        row["deferred"] += bool(named)
        listing.append({"file": rel(source), "line": line,
                        "imports": [short(e.target) for e in group if not e.implicit],
                        "deferred": list(named), "deferral_holds": bool(set(named) & pulls),
                        "pulls_in": sorted(pulls & set(HEAVY))})
    unplaced = sorted(short(m) for m in nodes if floor_of(m) is None)
    up = sorted({(e.source, e.target, e.line, e.kind) for e in edges
                 if floor_of(e.source) and floor_of(e.target) and floor_of(e.target)[0] > floor_of(e.source)[0]})
    n_deferred = sum(bool(r["deferred"]) for r in listing)
    return {
        "modules": len(nodes),
        "module_level_edges": sum(len(v) for v in module_graph.values()),
        "circles_module_level": [[short(m) for m in c] for c in strongly_connected(nodes, module_graph)],
        "circles_all_imports": [[short(m) for m in c] for c in strongly_connected(nodes, all_graph)],
        "unplaced": unplaced,
        "arrows_up": [{"from": short(s), "from_floor": floor_of(s)[0], "to": short(t), "to_floor": floor_of(t)[0],
                       "to_floor_name": floor_of(t)[1], "file": rel(s), "line": line, "kind": kind}
                      for s, t, line, kind in up],
        "function_level_imports": len(listing),
        "function_level_deferred": n_deferred,
        "function_level_undeferred": len(listing) - n_deferred,
        "function_level_files": len(per_file),
        "function_level_false_deferrals": [f"{r['file']}:{r['line']}" for r in listing
                                           if r["deferred"] and not r["deferral_holds"]],
        "function_level_per_file": dict(sorted(per_file.items())),
        "function_level_list": listing,
    }


def print_table(facts: dict, listing: bool) -> None:
    print(f"{facts['modules']} modules, {facts['module_level_edges']} module-level edges between them "
          f"(floors: the FLOORS table of import_layers.py)\n")
    print("| fact | count |\n|---|---:|")
    for label, value in (
            ("circles among module-level imports", len(facts["circles_module_level"])),
            ("circles among all imports (function-level and type-only included)", len(facts["circles_all_imports"])),
            ("arrows running back up (to a higher floor)", len(facts["arrows_up"])),
            ("modules without a floor", len(facts["unplaced"])),
            ("function-level own-module imports (statements)", facts["function_level_imports"]),
            ("... with '# deferred: <dependency>'", facts["function_level_deferred"]),
            ("... without (undeferred)", facts["function_level_undeferred"]),
            ("... deferring a dependency the import does not pull in", len(facts["function_level_false_deferrals"])),
            ("files with function-level own-module imports", facts["function_level_files"])):
        print(f"| {label} | {value} |")
    for title, key in (("module-level", "circles_module_level"), ("all imports", "circles_all_imports")):
        for circle in facts[key]:
            print(f"\ncircle ({title}, {len(circle)} modules): " + ", ".join(circle))
    if facts["unplaced"]:
        print("\nwithout a floor: " + ", ".join(facts["unplaced"]))
    if facts["arrows_up"]:
        print("\n| arrow up | floors | file:line | kind |\n|---|---|---|---|")
        for a in facts["arrows_up"]:
            print(f"| {a['from']} -> {a['to']} | {a['from_floor']:g} -> {a['to_floor']:g} ({a['to_floor_name']}) "
                  f"| {a['file']}:{a['line']} | {a['kind']} |")
    if facts["function_level_per_file"]:
        print("\n| file | function-level own imports | deferred |\n|---|---:|---:|")
        for path, row in facts["function_level_per_file"].items():
            print(f"| {path} | {row['imports']} | {row['deferred']} |")
        print(f"| total | {facts['function_level_imports']} | {facts['function_level_deferred']} |")
    if listing and facts["function_level_list"]:
        print("\n| file:line | imports | heavy packages it would add | deferred: |\n|---|---|---|---|")
        for row in facts["function_level_list"]:
            named = ", ".join(row["deferred"]) + ("" if row["deferral_holds"] else " (NOT pulled in)")
            print(f"| {row['file']}:{row['line']} | {', '.join(row['imports'])} | {', '.join(row['pulls_in'])} | "
                  f"{named if row['deferred'] else ''} |")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the facts as one JSON object")
    parser.add_argument("--list", action="store_true", help="also list every function-level own import")
    parser.add_argument("--root", type=Path, default=ROOT, help="the folder holding the package (default: here)")
    args = parser.parse_args(argv)
    if not (args.root / PACKAGE).is_dir():
        parser.error(f"--root={str(args.root)!r}: no {PACKAGE}/ folder there; give the folder that holds it")
    facts = analyse(args.root)
    if args.json:
        json.dump(facts, sys.stdout, indent=1)
        print()
    else:
        print_table(facts, args.list)
    return 0


if __name__ == "__main__":
    sys.exit(main())
