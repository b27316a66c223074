"""The README's recipe-config table is the one generated from the dataclasses, and every field has a doc."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_readme_table_is_generated_from_the_dataclasses():
    from torchtune_longshort.training.recipe_config.docs import config_table, readme_table

    assert readme_table((REPO / "README.md").read_text()) == config_table(), (
        "README's recipe-config table is stale: python -m torchtune_longshort.training.recipe_config.docs README.md")


def test_every_field_has_a_doc_and_a_unique_key():
    from torchtune_longshort.training.recipe_config.docs import rows

    keys = [k for k, _, _ in rows()]
    assert len(keys) == len(set(keys))
    assert all(doc.strip() for _, _, doc in rows())
    assert {"seq_len", "e_range", "loss.alpha", "validation.every_n_steps", "dataset", "resume"} <= set(keys)


def test_docs_command_refuses_a_file_it_cannot_read_in_one_line(tmp_path, capsys):
    # `--help` and a missing or folder path were read as the README: a FileNotFoundError / IsADirectoryError traceback
    from torchtune_longshort.training.recipe_config.docs import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "rewrite" in capsys.readouterr().out
    for bad in (tmp_path / "missing.md", tmp_path):
        assert main([str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(bad) in err and "cannot be read" in err
    assert not (tmp_path / "missing.md").exists()


# Every command the docs give a user names things that exist: a stale task name or --include_path (the cpu_medium
# page's `--include_path evals/tasks --tasks long_ppl`, refused by longshort-eval) fails here, not on a user's machine.
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
ENTRY = re.compile(r"(longshort-[a-z-]+|tune (?:run|validate)|lm[-_]eval|python -m |"
                   r"(?:PYTHONPATH=\S+ )?python benchmarks/)")


def _doc_commands():
    """(doc, line, command): each line of a fenced shell block (continuations joined) or an indented code block, and
    each inline command."""
    for doc in DOCS:
        fence, lang, pending = False, "", None
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            if line.strip().startswith("```"):
                fence, lang, pending = not fence, line.strip()[3:], None
                continue
            if fence and lang in ("", "bash", "sh"):
                pending = (pending[0], pending[1] + " " + line.strip()) if pending else (i, line.strip())
                if not line.rstrip().endswith("\\"):
                    yield doc.relative_to(REPO), pending[0], pending[1].split(" #")[0]
                    pending = None
            elif line.startswith("    ") and ENTRY.match(line.strip()):  # an indented code block
                yield doc.relative_to(REPO), i, line.strip().split(" #")[0]
            elif not fence:
                for span in re.findall(r"`([^`]+)`", line):
                    if ENTRY.match(span):
                        yield doc.relative_to(REPO), i, span


def _pack_tasks():
    return {p.stem for p in (REPO / "torchtune_longshort/eval/tasks").rglob("longshort_*.yaml")}


def _own_tasks(doc: Path):
    """A task of the reader's own that a page writes out: the ``task:`` of its YAML blocks, and the folder of the
    ```DIR/NAME.yaml``` it names for it (a command of that page may name both)."""
    text = (REPO / doc).read_text()
    blocks = "\n".join(re.findall(r"```yaml\n(.*?)```", text, re.S))
    tasks = set(re.findall(r"^task: (\w+)$", blocks, re.M))
    return tasks, {d for d, t in re.findall(r"`(\w+)/(\w+)\.yaml`", text) if t in tasks}


def test_every_command_in_the_docs_names_what_exists():
    scripts = set(re.findall(r"^(longshort-[a-z-]+) =", (REPO / "pyproject.toml").read_text(), re.M))
    tasks, shipped = _pack_tasks(), REPO / "configs"
    bad, copies = [], set()
    for doc, line, cmd in _doc_commands():
        where = f"{doc}:{line}: "
        for src, dst in re.findall(r"longshort-cp (\S+\.yaml) (\S+\.yaml)", cmd):
            copies.add(dst)
            bad += [] if (shipped / src).is_file() else [where + f"longshort-cp {src}: no such shipped config"]
        bad += [where + f"{s}: no such console script" for s in re.findall(r"\b(longshort-[a-z]+(?:-[a-z]+)*)", cmd)
                if s not in scripts]
        own_tasks, own_dirs = _own_tasks(doc)
        for names in re.findall(r"--tasks[ =]([\w,-]+)", cmd):
            bad += [where + f"--tasks {t}: not a task of the pack" for t in names.split(",")
                    if t not in tasks and t not in own_tasks]
        for path in re.findall(r"--include_path (\S+)", cmd):
            if not path.lstrip('"').startswith("$(") and not (REPO / path).exists() and path not in own_dirs:
                bad += [where + f"--include_path {path}: no such folder"]
        for path in re.findall(r"--config (\S+\.yaml)", cmd):
            if path not in copies and "<" not in path and not any((d / path).is_file() for d in (REPO, shipped)):
                bad += [where + f"--config {path}: no such file or shipped config"]
        for module in re.findall(r"python -m (torchtune_longshort[\w.]*)", cmd):
            file = REPO / Path(*module.split("."))
            if not (file.with_suffix(".py").is_file() or (file / "__main__.py").is_file()):
                bad += [where + f"python -m {module}: no such module"]
        bad += [where + f"tune run {p}: no such recipe" for p in re.findall(r"tune run (?:--\S+ \S+ )*(\S+\.py)", cmd)
                if "<" not in p and not re.fullmatch(r"[A-Z]/\w\.py", p) and not (REPO / p).is_file()]
        bad += [where + f"{p}: no such script" for p in re.findall(r"\b(benchmarks/\w+\.(?:py|sh))", cmd)
                if not (REPO / p).is_file()]
    assert not bad, "\n".join(bad)


# The docs' commands give the project's own CLIs only flags their parsers define: a flag is a `--name` string literal in
# the script (and the benchmarks modules it names) or in the module's package. Read with ``ast``, nothing imported;
# longshort-eval is left out (it takes lm-eval's flags).
_CLI = re.compile(r"(python benchmarks/\w+\.py|python -m torchtune_longshort[\w.]*|longshort-(?!eval\b)[a-z-]+)")


def _cli_files(cli, scripts):
    if cli.startswith("python benchmarks/"):
        script = REPO / cli.split()[1]
        named = [p for p in (REPO / "benchmarks").glob("*.py")
                 if p != script and re.search(rf"\b{p.stem}\b", script.read_text())]
        return [script, *named]
    base = REPO / Path(*(cli.split()[-1] if cli.startswith("python -m") else scripts[cli]).split("."))
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py"), *base.parent.glob("*.py")]


def test_every_flag_a_docs_command_gives_our_clis_is_theirs():
    import ast
    import functools

    @functools.lru_cache(maxsize=None)
    def flags_in(path):
        return {f for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
                for f in re.findall(r"--[A-Za-z][\w-]*", node.value)}

    scripts = dict(re.findall(r'^(longshort-[a-z-]+) = "([\w.]+):', (REPO / "pyproject.toml").read_text(), re.M))
    bad = []
    for doc, line, cmd in _doc_commands():
        for part in re.split(r"&&|\|\||;|\|", cmd):
            found = _CLI.search(part)
            if not found or not (found[1].startswith("python") or found[1] in scripts):
                continue
            given = set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", part[found.end():])) - {"--help"}
            known = set().union(*(flags_in(f) for f in _cli_files(found[1], scripts) if f.is_file()))
            bad += [f"{doc}:{line}: {found[1]} {flag}: no such flag" for flag in sorted(given - known)]
    assert not bad, "\n".join(bad)


def test_a_figures_command_in_the_docs_keeps_every_method_its_report_holds():
    # docs/plots_before_after/README.md redrew docs/study/cpu_small with --methods pi,yarn after its runs gained CLEX:
    # the command replaced its 3-panel figures with 2-panel ones (alpha_curves.png 1485 -> 990 pixels wide)
    bad = []
    for doc, line, cmd in _doc_commands():
        found = re.search(r"study\.figures .*--methods (\S+).*--report (docs/\S+)", cmd)
        if found and (REPO / found[2] / "runs").is_dir():
            held = {run.name.split("_a")[0] for run in (REPO / found[2] / "runs").iterdir() if "_a" in run.name}
            if held - set(found[1].split(",")):
                bad.append(f"{doc}:{line}: --methods {found[1]} leaves out {sorted(held - set(found[1].split(',')))}")
    assert not bad, "\n".join(bad)


def test_every_benchmark_help_gives_its_docstrings_first_paragraph_whole():
    """``--help`` of attention_layout, eval_phases, eval_row_memory and eval_startup ended mid-sentence ("... hands
    them over (multi-head attention, the"): their description was the docstring's first line, not its first
    paragraph; fused_precision had no parser, so ``--help`` ran it. The description each parser is given, evaluated on
    the script's own docstring (read with ``ast``)."""
    import ast

    bad = []
    for script in sorted((REPO / "benchmarks").glob("*.py")):
        tree = ast.parse(script.read_text())
        doc = ast.get_docstring(tree, clean=False) or ""
        if '__name__ == "__main__"' in script.read_text() and "ArgumentParser" not in script.read_text():
            bad.append(f"{script.name}: a script without a parser (--help runs it)")  # fused_precision did
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ArgumentParser":
                for kw in node.keywords:
                    if kw.arg == "description":
                        text = eval(compile(ast.Expression(kw.value), str(script), "eval"), {"__doc__": doc})
                        if doc.split("\n\n")[0].strip() not in text:
                            bad.append(f"{script.name}: --help reads {text[-40:]!r}")
    assert not bad, "\n".join(bad)
