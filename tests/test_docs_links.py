"""Every link in README.md and docs/ (its pages and the reports under it) leads somewhere: a relative file link
names a file or folder that exists, and a link to an anchor (`(#x)`, `(docs/x.md#y)`, `(README.md#y)`) names a
heading of its file under GitHub's slug rule (lowercase; markup and punctuation other than '-' and '_' dropped; each
space a '-'; a repeated slug gets -1, -2, ...). Links and headings are read by markdown-it-py (CommonMark), so code
blocks and code spans hold no links. The README's contents list links its ## and ### headings, in order."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

markdown_it = pytest.importorskip("markdown_it")

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]   # docs/*.md and the reports under docs/
_PARSER = markdown_it.MarkdownIt("commonmark").enable("table")


def github_slug(text: str) -> str:
    """GitHub's anchor for a heading whose rendered text is `text` (github-slugger's rule)."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _rendered(inline) -> str:
    """A heading's text as GitHub renders it: code spans' contents, link and emphasis text."""
    return "".join(t.content for t in inline.children or [] if t.type in ("text", "code_inline"))


def parse(text: str) -> tuple[list[str], list[str]]:
    """(the anchors of `text`'s headings, in order, duplicates numbered; every link or image target)."""
    tokens = _PARSER.parse(text)
    anchors: list[str] = []
    seen: dict[str, int] = {}
    targets: list[str] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            slug = base = github_slug(_rendered(tokens[i + 1]))
            while slug in seen:
                seen[base] += 1
                slug = f"{base}-{seen[base]}"
            seen[slug] = 0
            anchors.append(slug)
        for child in tok.children or []:
            if child.type == "link_open":
                targets.append(child.attrs["href"])
            elif child.type == "image":
                targets.append(child.attrs["src"])
    return anchors, targets


@functools.lru_cache(maxsize=None)
def _anchors_of(md: Path) -> tuple[str, ...]:
    return tuple(parse(md.read_text(encoding="utf-8"))[0])


def broken_links(md: Path, text: str | None = None) -> list[str]:
    """Each link of `md` (its text, or `text` given for it) that leads nowhere, as 'file: target: why'."""
    _, targets = parse(md.read_text(encoding="utf-8") if text is None else text)
    bad = []
    for target in targets:
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto:
            continue
        path_part, _, anchor = unquote(target).partition("#")
        dest = md if not path_part else (md.parent / path_part).resolve()
        where = f"{md.relative_to(ROOT)}: ({target})"
        if not dest.exists():
            bad.append(f"{where}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors_of(dest):
                bad.append(f"{where}: no heading of {dest.name} has the anchor #{anchor}")
    return bad


@pytest.mark.parametrize(
    "heading, anchor",
    [   # anchors GitHub gives these headings (github-slugger's cases, and ones this repository links to)
        ("Hello World", "hello-world"),
        ("foo.bar", "foobar"),
        ("`code` heading", "code-heading"),
        ("Привет non-ascii we ♥ Unicode", "привет-non-ascii-we--unicode"),
        ("snake_case and kebab-case", "snake_case-and-kebab-case"),
        ("Where the test suite's time goes (`benchmarks/suite_cost.py`)",
         "where-the-test-suites-time-goes-benchmarkssuite_costpy"),
        ("Import graph (`benchmarks/import_graph.py`; issue 35)", "import-graph-benchmarksimport_graphpy-issue-35"),
        ("A [linked](https://x.org) *emphasised* word", "a-linked-emphasised-word"),
    ],
)
def test_heading_anchor_follows_githubs_rule(heading, anchor):
    assert parse(f"# {heading}\n")[0] == [anchor]


def test_repeated_headings_are_numbered_as_github_numbers_them():
    assert parse("# Run\n\n## Run\n\n### Run\n\n# Run 1\n")[0] == ["run", "run-1", "run-2", "run-1-1"]


def test_links_in_code_are_not_links():
    text = "```\n[x](#nowhere)\n```\n\n`[y](#nowhere)` and [z](#here)\n\n# Here\n"
    assert parse(text)[1] == ["#here"]


def test_every_link_of_the_readme_and_docs_leads_somewhere():
    bad = [line for md in DOCS for line in broken_links(md)]
    assert not bad, "\n".join(bad)


def test_a_broken_link_is_named():
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    broken = text.replace("](#the-tests)", "](#the-test)", 1).replace(
        "](docs/rope.md#longrope)", "](docs/rope.md#long-rope)", 1) + "\n[gone](docs/no_such_page.md)\n"
    bad = broken_links(readme, broken)
    assert [b.split(": ")[1] for b in bad] == ["(#the-test)", "(docs/rope.md#long-rope)", "(docs/no_such_page.md)"]


def contents_and_headings(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(the contents list under the README's intro as (depth, anchor), its ## and ### headings as (depth, anchor))."""
    anchors, _ = parse(text)
    levels = [int(t.tag[1]) for t in _PARSER.parse(text) if t.type == "heading_open"]
    listed = [(len(indent) // 2 + 2, anchor) for indent, anchor in
              re.findall(r"^( *)- \[.*?\]\(#([^)]+)\)$", text.partition("**Contents**")[2].split("\n\n#")[0], re.M)]
    return listed, [(lv, a) for lv, a in zip(levels, anchors) if lv in (2, 3)]


def test_the_readmes_contents_list_links_every_section_in_order():
    # the README (1500 lines) had no contents list and 360-line sections without a subsection: a heading added
    # without its line here, or renamed under it, is named
    listed, headings = contents_and_headings((ROOT / "README.md").read_text(encoding="utf-8"))
    assert listed == headings, (
        f"README's contents list differs from its ## / ### headings: listed, not a heading: "
        f"{[a for a in listed if a not in headings]}; a heading not listed: {[h for h in headings if h not in listed]}")


def test_a_heading_the_contents_list_lacks_is_named():
    text = (ROOT / "README.md").read_text(encoding="utf-8").replace("\n## Layout\n", "\n## Layout\n\n### Added\n", 1)
    listed, headings = contents_and_headings(text)
    assert [h for h in headings if h not in listed] == [(3, "added")]
