"""The lists the README and docs/ write by hand name what the code's registries hold: RoPE methods and position-id
samplers (``ROPE_METHODS``, ``POSITION_SAMPLERS``), the task pack's table (``TASK_FAMILIES``: tasks, metrics, default
lengths, the model a task needs), the families that build random weights (``ModelFamily.from_dims``), the tokenizer
formats (``TOKENIZER_FORMATS``), LongBench-E's datasets and BABILong's QA tasks, the synthetic experiments' tasks,
positional encodings and beyond-the-paper figures, the eval report's heatmap metrics (``CELL_LABELS``), the study
config's sections (``StudyConfig``) and the loss's ``DIVERGENCES``. Each check returns one message per entry missing
from a list or extra in it; a fake registry entry shows each check names it."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Iterable, List

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
ROPE_DOC = REPO / "docs" / "rope.md"
LONGBENCH_DOC = REPO / "docs" / "longbench_babilong.md"


def _between(text: str, start: str, end: str) -> str:
    assert start in text, f"the list's opening {start!r} is gone"
    part = text.split(start, 1)[1]
    assert end in part, f"the list's end {end!r} is gone after {start!r}"
    return part.split(end, 1)[0]


def _without_parentheses(text: str) -> str:
    """``text`` less every parenthesized aside (nested ones too): what the list itself names."""
    out, depth = [], 0
    for ch in text:
        depth += ch == "("
        if not depth:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(out)


def _ticked(text: str) -> List[str]:
    return re.findall(r"`([^`]+)`", text)


def _table_rows(text: str, header: str) -> List[List[str]]:
    """The cells of each row of the Markdown table under ``header`` (its first line)."""
    rows = []
    for line in text.split(header, 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _compare(where: str, listed: Iterable[str], registry: Iterable[str], name: str) -> List[str]:
    from torchtune_longshort.rope.registry import DottedRegistry, is_dotted_path

    if isinstance(registry, DottedRegistry):  # a path this process loaded (a test's own class, a shipped one by its
        registry = [e for e in registry if not is_dotted_path(e)]  # path) is kept under it: no name the docs list
    listed, registry = list(listed), list(registry)
    return ([f"{where} lacks {name} entry {e!r}" for e in registry if e not in listed]
            + [f"{where} lists {e!r}, which {name} does not hold" for e in listed if e not in registry])


# ------------------------------------------------------------------------------------------------ the checks
def rope_drift() -> List[str]:
    from torchtune_longshort import rope

    readme = _between(README.read_text(), "Methods (`ROPE_METHODS`, `build_rope`):", "Each is a drop-in")
    methods, samplers = readme.split("position-id samplers (`POSITION_SAMPLERS`):")
    doc = ROPE_DOC.read_text()
    table = [_ticked(row[0])[0] for row in _table_rows(doc, "| name | paper |")]
    doc_samplers = _without_parentheses(doc.split("compose with every frequency\nmethod:", 1)[1]).split(". ", 1)[0]
    loads_as = {m.strip(): row[1] for row in _table_rows(doc, "| method | loads in transformers as |")
                for m in row[0].split("/")}
    unrepresentable = [m for m, cls in rope.ROPE_METHODS.items()
                       if not getattr(cls, "transformers_representable", True)]
    return (_compare("README's RoPE methods", _ticked(_without_parentheses(methods)), rope.ROPE_METHODS, "ROPE_METHODS")
            + _compare("README's position-id samplers", _ticked(_without_parentheses(samplers)), rope.POSITION_SAMPLERS,
                       "POSITION_SAMPLERS")
            + _compare("docs/rope.md's methods table", table, rope.ROPE_METHODS, "ROPE_METHODS")
            + _compare("docs/rope.md's position-id samplers", _ticked(doc_samplers),
                       rope.POSITION_SAMPLERS, "POSITION_SAMPLERS")
            + _compare("docs/rope.md's 'loads in transformers as' table", loads_as, rope.ROPE_METHODS, "ROPE_METHODS")
            + _compare("docs/rope.md's 'not representable' row", [m for m, v in loads_as.items() if "not representable"
                                                                 in v], unrepresentable,
                       "the methods whose class is not transformers_representable"))


def _yaml_default_lengths(family_key: str, task: str):
    path = REPO / "torchtune_longshort" / "eval" / "tasks" / family_key / f"{task}.yaml"
    found = re.search(r"^  max_seq_lengths: *(\S+)", path.read_text(), re.M) if path.is_file() else None
    return found.group(1).split(",") if found else None


def task_table_drift() -> List[str]:
    from torchtune_longshort.eval.tasks import TASK_FAMILIES

    rows = {_ticked(row[0])[0]: row for row in _table_rows(README.read_text(), "| task | what |")}
    out = _compare("README's task table", rows, [f.task for f in TASK_FAMILIES.values()], "TASK_FAMILIES")
    for key, fam in TASK_FAMILIES.items():
        if fam.task not in rows:
            continue
        where = f"README's task table row {fam.task}"
        named = _ticked(rows[fam.task][1])
        bases = {n.split("_<", 1)[0] for n in named if "_<" in n}
        out += [f"{where} names no metric {m!r} (`{m}` or `{m}_<L>`)" for m in fam.metrics
                if m not in named and m not in bases]
        out += [f"{where} names metric `{b}_<...>`, which TASK_FAMILIES[{key!r}].metrics does not hold"
                for b in sorted(bases - set(fam.metrics))]
        default = _yaml_default_lengths(key, fam.task)
        said = re.search(r"default (?:lengths )?(\w+)\.\.(\w+)", rows[fam.task][0])
        if default and (not said or list(said.groups()) != [default[0], default[-1]]):
            out.append(f"{where} should say '(default {default[0]}..{default[-1]})', the task YAML's max_seq_lengths")
        if said and not default:
            out.append(f"{where} gives default lengths, but the task YAML sets no max_seq_lengths")
        needs = "needs the `longshort` model" in rows[fam.task][1]
        if needs != (fam.needs_model == "longshort"):
            out.append(f"{where}: 'needs the `longshort` model' said {needs}, TASK_FAMILIES needs_model "
                       f"{fam.needs_model!r}")
    return out


def model_family_drift() -> List[str]:
    from torchtune_longshort.models import MODEL_FAMILIES, TOKENIZER_FORMATS

    dims = [f.name for f in MODEL_FAMILIES.values() if f.from_dims is not None]
    readme = README.read_text()
    names = r"(`\w+`(?:(?:,|\s+and)\s+`\w+`)*)"
    listed = _ticked(re.search(r"as `step_0` \(families " + names + "; another family", readme).group(1))
    doc = _ticked(re.search(r"\(the " + names + r" families\s+write one;", ROPE_DOC.read_text()).group(1))
    formats = _ticked(_between(readme, "Tokenizer formats, detected from the folder in the family's order:", ". "))
    return (_compare("README's random-weight families", listed, dims, "a family with from_dims")
            + _compare("docs/rope.md's random-weight families", doc, dims, "a family with from_dims")
            + _compare("README's tokenizer formats", formats, [f.files[0] for f in TOKENIZER_FORMATS.values()],
                       "TOKENIZER_FORMATS (each format's first file)"))


def benchmark_drift() -> List[str]:
    from torchtune_longshort.eval.tasks.babilong.stories import QA_TASKS
    from torchtune_longshort.eval.tasks.longbench_e.official_config import LONGBENCH_E_DATASETS

    readme = README.read_text()
    n = len(LONGBENCH_E_DATASETS)
    out = [f"README says 'all {k} LongBench-E datasets'; LONGBENCH_E_DATASETS holds {n}"
           for k in re.findall(r"all (\d+) LongBench-E datasets", readme) if int(k) != n]
    row = next(r for r in _table_rows(LONGBENCH_DOC.read_text(), "| What |") if r[0] == "datasets")
    out += _compare("docs/longbench_babilong.md's datasets row", row[2].split(":", 1)[1].strip().split(", "),
                    [d.strip() for d in LONGBENCH_E_DATASETS], "LONGBENCH_E_DATASETS")
    qa = [f"qa{i}" for a, b in re.findall(r"BABILong QA(\d)-QA(\d)", readme) for i in range(int(a), int(b) + 1)]
    return out + _compare("README's BABILong QA range", dict.fromkeys(qa), QA_TASKS, "QA_TASKS")


def synthetic_drift() -> List[str]:
    from torchtune_longshort.synthetic import models, tasks
    from torchtune_longshort.synthetic.sparsity_probes import figures

    text = _between(README.read_text(), "## Synthetic length-generalization", "## One-command study")
    found = re.search(r"\n(\w+(?: / \w+)*) prediction from binary sequences with a small causal transformer "
                      r"\(([^)]*)\)", text)
    beyond = _ticked(_between(text, "(`--figure beyond`, or one of", ")"))
    return (_compare("README's synthetic tasks", found.group(1).lower().split(" / "), tasks.TASKS, "synthetic TASKS")
            + _compare("README's synthetic positional encodings", found.group(2).lower().split(", "),
                       models.POSITIONAL_ENCODINGS, "POSITIONAL_ENCODINGS")
            + _compare("README's beyond-the-paper figures", beyond, figures.BEYOND_FIGURES, "BEYOND_FIGURES"))


def loss_drift() -> List[str]:
    """The divergence names, and each argument of the loss table's calls (``LongShortLoss(alpha, ...)``) against
    ``inspect.signature`` of what it names."""
    import inspect

    from torchtune_longshort import loss

    text = README.read_text()
    listed = [n.strip('"') for n in _ticked(_between(text, "`DIVERGENCES` lists the divergence names (", ")"))]
    drift = _compare("README's divergence names", listed, loss.DIVERGENCES, "DIVERGENCES")
    for row in _table_rows(_between(text, "## The loss (`torchtune_longshort.loss`)", "`DIVERGENCES`"), "| name |"):
        name, args = re.fullmatch(r"`(\w+)\((.*)\)`", row[0]).groups()
        drift += _compare(f"README's {name} row", [a.split("=")[0].strip() for a in args.split(",")],
                          inspect.signature(getattr(loss, name)).parameters, f"{name}'s signature")
    return drift


def report_drift() -> List[str]:
    from torchtune_longshort.eval.report import build, results_io

    listed = re.findall(r"`(\w+)_<len>_d<depth>`", (REPO / "docs" / "eval.md").read_text())
    return (_compare("docs/eval.md's heatmap metrics", listed, build.CELL_LABELS, "the report's CELL_LABELS")
            + [f"docs/eval.md's heatmap metric {m!r} is not one the report's CELL_METRIC reads" for m in listed
               if not results_io.CELL_METRIC.match(f"{m}_4k_d50")])


def study_drift() -> List[str]:
    import typing

    from torchtune_longshort.study import config

    def study_classes(hint) -> List[type]:
        inner = [c for a in typing.get_args(hint) for c in study_classes(a)]
        own = isinstance(hint, type) and hint.__module__.startswith("torchtune_longshort.study.")
        return [hint] + inner if own else inner

    hints = typing.get_type_hints(config.StudyConfig)
    sections = {f.name: study_classes(hints[f.name]) for f in dataclasses.fields(config.StudyConfig)}
    sections = {name: classes for name, classes in sections.items() if classes}
    files = {"study/" + sys.modules[c.__module__].__file__.rsplit("/study/", 1)[1]
             for classes in sections.values() for c in classes}
    said = _between(README.read_text(), "`torchtune_longshort.study.config.StudyConfig`, its sections", ":")
    listed = [n for n in _ticked(said) if not n.endswith(".py")]
    return (_compare("README's StudyConfig sections", listed, sections, "StudyConfig (a field of a study class)")
            + _compare("README's StudyConfig section files", [n for n in _ticked(said) if n.endswith(".py")],
                       sorted(files), "the sections' modules"))


CHECKS = {"rope": rope_drift, "tasks": task_table_drift, "families": model_family_drift,
          "benchmarks": benchmark_drift, "synthetic": synthetic_drift, "report": report_drift,
          "study": study_drift, "loss": loss_drift}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_docs_lists_name_what_the_registries_hold(name):
    drift = CHECKS[name]()
    assert not drift, "\n".join(drift)


# -------------------------------------------------------------------------------- each check can fail
def _fake_rope(monkeypatch):
    from torchtune_longshort import rope
    monkeypatch.setitem(rope.ROPE_METHODS, "fake_rope", rope.ROPE_METHODS["linear"])
    return "rope", "'fake_rope'"


def _fake_sampler(monkeypatch):
    from torchtune_longshort import rope
    monkeypatch.setitem(rope.POSITION_SAMPLERS, "fake_sampler", rope.POSITION_SAMPLERS["pose"])
    return "rope", "'fake_sampler'"


def _fake_task(monkeypatch):
    from torchtune_longshort.eval.tasks import TASK_FAMILIES
    monkeypatch.setitem(TASK_FAMILIES, "fake", dataclasses.replace(TASK_FAMILIES["ppl"], task="longshort_fake"))
    return "tasks", "'longshort_fake'"


def _fake_metric(monkeypatch):
    from torchtune_longshort.eval.tasks import TASK_FAMILIES
    ppl = TASK_FAMILIES["ppl"]
    monkeypatch.setitem(TASK_FAMILIES, "ppl", dataclasses.replace(ppl, metrics=ppl.metrics + ("fake_metric",)))
    return "tasks", "'fake_metric'"


def _fake_needs(monkeypatch):
    from torchtune_longshort.eval.tasks import TASK_FAMILIES
    passkey = dataclasses.replace(TASK_FAMILIES["passkey"], needs_model="longshort")
    monkeypatch.setitem(TASK_FAMILIES, "passkey", passkey)
    return "tasks", "longshort_passkey: 'needs"


def _fake_dims_family(monkeypatch):
    from torchtune_longshort.models import MODEL_FAMILIES
    monkeypatch.setitem(MODEL_FAMILIES, "fake_family", dataclasses.replace(MODEL_FAMILIES["llama"], name="fake_family"))
    return "families", "'fake_family'"


def _fake_format(monkeypatch):
    from torchtune_longshort.models import TOKENIZER_FORMATS
    fake = dataclasses.replace(TOKENIZER_FORMATS["hf_json"], name="fake_format", files=("fake.json",))
    monkeypatch.setitem(TOKENIZER_FORMATS, "fake_format", fake)
    return "families", "'fake.json'"


def _fake_dataset(monkeypatch):
    from torchtune_longshort.eval.tasks.longbench_e import official_config
    datasets = official_config.LONGBENCH_E_DATASETS
    monkeypatch.setitem(datasets, "fake_dataset", datasets["lcc"])
    return "benchmarks", "'fake_dataset'"


def _fake_qa(monkeypatch):
    from torchtune_longshort.eval.tasks.babilong import stories
    monkeypatch.setattr(stories, "QA_TASKS", stories.QA_TASKS + ("qa6",))
    return "benchmarks", "'qa6'"


def _fake_synthetic(monkeypatch):
    from torchtune_longshort.synthetic import models
    monkeypatch.setattr(models, "POSITIONAL_ENCODINGS", models.POSITIONAL_ENCODINGS + ("fake_pe",))
    return "synthetic", "'fake_pe'"


def _fake_beyond(monkeypatch):
    from torchtune_longshort.synthetic.sparsity_probes import figures
    monkeypatch.setattr(figures, "BEYOND_FIGURES", figures.BEYOND_FIGURES + ("fake_figure",))
    return "synthetic", "'fake_figure'"


def _fake_cell(monkeypatch):
    from torchtune_longshort.eval.report import build
    monkeypatch.setitem(build.CELL_LABELS, "fake_cell", "fake")
    return "report", "'fake_cell'"


def _fake_divergence(monkeypatch):
    from torchtune_longshort import loss
    monkeypatch.setattr(loss, "DIVERGENCES", loss.DIVERGENCES + ("fake_divergence",))
    return "loss", "'fake_divergence'"


def _fake_loss_argument(monkeypatch):
    from torchtune_longshort import loss

    def mean_divergence(logits_a, logits_b, mask=None, divergence="sce", fake_argument=None):
        pass

    monkeypatch.setattr(loss, "mean_divergence", mean_divergence)
    return "loss", "'fake_argument'"


def _fake_section(monkeypatch):
    from torchtune_longshort.study import config, grid
    fake = dataclasses.make_dataclass("FakeStudy", [("fake_section", grid.Variants, dataclasses.field(default=None))],
                                      bases=(config.StudyConfig,), frozen=True)
    monkeypatch.setattr(config, "StudyConfig", fake)
    return "study", "'fake_section'"


@pytest.mark.parametrize("fake", [_fake_rope, _fake_sampler, _fake_task, _fake_metric, _fake_needs, _fake_dims_family,
                                  _fake_format, _fake_dataset, _fake_qa, _fake_synthetic, _fake_beyond,
                                  _fake_cell, _fake_section, _fake_divergence, _fake_loss_argument],
                         ids=lambda f: f.__name__[1:])
def test_a_registry_entry_no_list_names_is_named_by_its_check(monkeypatch, fake):
    check, entry = fake(monkeypatch)
    drift = CHECKS[check]()
    assert any(entry in line for line in drift), drift


def test_the_passkey_haystack_lists_name_the_haystacks_the_task_takes():
    """The passkey YAML's comment listed filler, stdlib, pg19 and local, docs/eval.md and task.py's docstring added hf
    (which the metadata check let through, and which then failed: no passkey key names its dataset_path), and none
    named stdlib_tests or stdlib_heldout. Each list is now compared with PASSKEY_HAYSTACKS, whose names the text
    reader is the reference for: every corpus name is one of iter_texts' SOURCES, and hf, left out, is refused by
    iter_texts without a dataset_path."""
    from torchtune_longshort.eval.tasks import PASSKEY_HAYSTACKS, check_metadata_values
    from torchtune_longshort.eval.tasks.common.long_text import SOURCES, iter_texts
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError
    from torchtune_longshort.eval.tasks.passkey import task

    yaml_text = (Path(task.__file__).parent / "longshort_passkey.yaml").read_text()
    comment = _between(yaml_text, "# Haystack:", "; or ready-made")
    in_yaml = re.findall(r'"([a-z_0-9]+)"', comment.split("passkey_haystack", 1)[1])
    in_docs = re.findall(r"([a-z_0-9]+)", _between((REPO / "docs" / "eval.md").read_text(), "(`passkey_haystack`: ",
                                                     ")").replace("`passkey_haystack_files`", ""))
    in_doc = re.findall(r"([a-z_0-9]+)", _between(task.__doc__, "``passkey_haystack`` (", ":"))
    for where, names in (("longshort_passkey.yaml", in_yaml), ("docs/eval.md", ["filler", *in_docs]),
                         ("task.py", in_doc)):
        assert sorted(names) == sorted(PASSKEY_HAYSTACKS), (where, names)
    assert set(PASSKEY_HAYSTACKS) - {"filler"} <= set(SOURCES) and "hf" in SOURCES
    with pytest.raises(TaskDataError, match="needs dataset_path"):
        next(iter_texts(source="hf"))
    with pytest.raises(TaskDataError, match=f"passkey_haystack='hf': expected one of {', '.join(PASSKEY_HAYSTACKS)}"):
        check_metadata_values({"passkey_haystack": "hf"})
