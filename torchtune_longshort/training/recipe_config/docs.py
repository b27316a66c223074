"""The README's table of the recipe config, generated from the dataclasses (the fields' keys, defaults and docs).

    python -m torchtune_longshort.training.recipe_config.docs            # print the table
    python -m torchtune_longshort.training.recipe_config.docs README.md  # rewrite the table between its markers

``tests/test_config_docs.py`` checks that the README holds exactly this table.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterator, List, Tuple

from torchtune_longshort.config.fields import FROM_COMPONENT, REQUIRED, resume_policies, yaml_key
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig
from torchtune_longshort.config.values import resolve_component

START, END = "<!-- recipe-config-table:start -->", "<!-- recipe-config-table:end -->"


def _default(f, cls: type) -> str:
    default = f.metadata["default"]
    if default is REQUIRED:
        return "required"
    if default is FROM_COMPONENT:
        owner = getattr(cls, "DOC_COMPONENT", None)
        if owner is not None:
            p = inspect.signature(resolve_component("_component_", owner)).parameters[yaml_key(f)]
            return f"`{_value(p.default)}` ({owner.rsplit('.', 1)[1]}'s)"
        return "the component's"
    return f"`{_value(default)}`"


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


def rows(cls: type = RecipeConfig, prefix: str = "") -> Iterator[Tuple[str, str, str]]:
    """``(key, default, doc)`` of every field, sections before their fields, in declaration order."""
    for f in fields(cls):
        meta = f.metadata
        if meta.get("flat"):
            yield from rows(meta["section"], prefix)
        elif "doc" in meta and yaml_key(f) != "_component_":
            key = prefix + yaml_key(f)
            yield key, _default(f, cls), meta["doc"]
            if meta["section"] is not None:
                yield from rows(meta["section"], key + ".")


def config_table() -> str:
    """The Markdown table (with its markers); ``on resume``: the key's resume policy (a nested key its top-level
    key's, unless its section names it), :data:`~torchtune_longshort.config.fields.RESUME_POLICIES`."""
    policy = resume_policies(RecipeConfig)
    lines: List[str] = [START, "| key | default | on resume | what |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {d} | {policy.get(k) or policy[k.split('.', 1)[0]]} | {doc} |" for k, d, doc in rows()]
    return "\n".join(lines + [END])


def readme_table(text: str) -> str:
    """The table block of a README's text (markers included), '' when it has none."""
    if START not in text or END not in text:
        return ""
    return text[text.index(START): text.index(END) + len(END)]


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m torchtune_longshort.training.recipe_config.docs",
                                description="Print the README's recipe-config table, generated from the dataclasses, "
                                            "or rewrite it in a file between its markers.")
    p.add_argument("readme", nargs="?", help="a file holding the table's markers (README.md) to rewrite in place; "
                                             "without it the table is printed")
    a = p.parse_args(argv)
    if a.readme is None:
        print(config_table())
        return 0
    path = Path(a.readme)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        print(f"{p.prog}: error: {path}: cannot be read ({e.strerror if isinstance(e, OSError) else e}); "
              "name the README that holds the table's markers", file=sys.stderr)
        return 2
    old = readme_table(text)
    if not old:
        print(f"{p.prog}: error: {path}: no {START} ... {END} block to rewrite", file=sys.stderr)
        return 2
    path.write_text(text.replace(old, config_table()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
