"""The evaluation settings a study's runs used, read from their records (each ``result.json``'s ``spec.eval``,
written when the run was evaluated), so that a report rebuilt after the config changed is labelled by what was run
(its perplexity text, BABILong's lengths and sample count, ``max_length``, ...), not by what the config says now.

:func:`eval_used` gives the config with its ``eval`` section as the runs recorded it, field by field, and the
report's lines that say where the config now differs and where the runs disagree among themselves.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from typing import Any, Dict, List, Tuple

from torchtune_longshort.config.fields import build_section, yaml_key
from torchtune_longshort.refusals import one_line
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.eval_config import EvalConfig
from torchtune_longshort.study.fields import plain

# how the report's lines about the runs' own settings begin (under the title, where --note's lines go too: a rebuild
# that reads the committed note back leaves these out, benchmarks/rebuild_study_reports.py)
GENERATED_LINES = ("Evaluation settings: these runs used ", "The runs do not share one evaluation setting")
_NOT_RECORDED = "eval_base"  # a run's spec leaves it out (Runner.spec_of): the config's value stands


def _recorded(cfg: StudyConfig, rec: Dict[str, Any]) -> EvalConfig:
    """A run's ``spec.eval`` as an :class:`EvalConfig`: a key it lacks that is written even when unset (a field added
    since it ran) takes the config's value; one written only when set (``metadata``, ``babilong.haystack``) is unset;
    a key this version no longer has is left out (it labels nothing)."""
    ev, known = rec["spec"]["eval"], {yaml_key(f): f for f in fields(EvalConfig) if "doc" in f.metadata}
    node = {k: v for k, v in ev.items() if k in known and k != _NOT_RECORDED}
    for key, f in known.items():
        if key not in ev and (key == _NOT_RECORDED or not f.metadata.get("written_if_set")):
            node[key] = plain(getattr(cfg.eval, f.name))
    return build_section(EvalConfig, node, f"{rec.get('key')}: spec.eval", local=False)


def _text(v: Any) -> str:
    """A value as YAML writes it (``["0k"]``, ``null``, ``true``)."""
    return v if isinstance(v, str) else json.dumps(v, default=str)


def _setting(key: str, v: Any) -> str:
    return f"`{key}: {_text(v)}`"


def _differ(a: Any, b: Any, prefix: str = "") -> List[Tuple[str, Any, Any]]:
    """``(dotted key, a's value, b's value)`` where two sections differ; a section set on both sides is compared
    key by key (``babilong.n``), one unset on a side as a whole (``metadata: null``)."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [] if a == b else [(prefix.rstrip("."), a, b)]
    return [d for k in dict.fromkeys([*a, *b]) for d in _differ(a.get(k), b.get(k), f"{prefix}{k}.")]


def eval_used(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]) -> Tuple[StudyConfig, List[str]]:
    """``cfg`` with each ``eval`` field as every run that recorded one used it (a field the runs disagree on keeps
    the config's value), and the report's lines: the fields where the config now says otherwise ("these runs used
    X; the config now says Y"), the fields the runs disagree on (each value with its runs), and the runs whose
    record this version cannot read. Runs with no ``spec.eval`` (not run, or written by an early version) are
    left out; none at all: ``cfg`` as it is, no lines."""
    used: Dict[str, EvalConfig] = {}
    lines: List[str] = []
    for key, rec in recs.items():
        ev = (rec.get("spec") or {}).get("eval") if rec.get("status") != "not run" else None
        if isinstance(ev, dict):
            try:
                used[key] = _recorded(cfg, rec)
            except (ValueError, KeyError) as e:  # a value or a nested key this version refuses (ConfigKeyError)
                lines.append(f"Run {key}'s recorded eval settings cannot be read by this version ({one_line(e)}); "
                             "the labels below do not rely on them.")
    if not used:
        return cfg, lines
    names = [f.name for f in fields(EvalConfig) if "doc" in f.metadata and f.name != _NOT_RECORDED]
    agreed, split = {}, []
    for name in names:
        by_value: Dict[str, List[str]] = {}
        for key, ev in used.items():
            by_value.setdefault(repr(plain(getattr(ev, name))), []).append(key)
        if len(by_value) == 1:
            agreed[name] = getattr(next(iter(used.values())), name)
            continue
        keys = [yaml_key(f) for f in fields(EvalConfig) if f.name == name]
        split.append(f"`{keys[0]}`: " + "; ".join(
            f"{_text(plain(getattr(used[runs[0]], name)))} ({', '.join(runs)})" for runs in by_value.values()))
    now = replace(cfg.eval, **agreed)
    changed = _differ(plain(now.as_dict()), plain(cfg.eval.as_dict()))
    if changed:
        lines.append(GENERATED_LINES[0] + ", ".join(_setting(k, a) for k, a, _ in changed)
                     + "; the config now says " + ", ".join(_setting(k, b) for k, _, b in changed)
                     + ". The tables, figures and claims below are labelled by what the runs used (their "
                     "result.json's `spec.eval`).")
    if split:
        lines.append(GENERATED_LINES[1] + " (their result.json's `spec.eval`): "
                     + " | ".join(split) + ". The labels of these settings below follow the config.")
    return replace(cfg, eval=now), lines
