"""Every config in configs/ (ours: not synthetic/ or study/) passes torchtune's own validation, the study configs
are refused by it with the reason, and the other base models' configs differ from the Llama-2 one only where the
model differs; validation text held out from training text; config names resolved (a tilde, a typo, none near) and
the commands shown in the configs' headers and the --help texts. longshort-cp's copies are test_configs_cp.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(
    p for p in (REPO / "configs").rglob("*.yaml") if p.relative_to(REPO / "configs").parts[0] not in ("synthetic", "study")
)


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(REPO / "configs")) for p in CONFIGS])
def test_tune_validate_accepts(path):
    # The same check as `tune validate <file>` (torchtune.config.validate), in-process to keep the suite fast.
    from torchtune import config

    config.validate(OmegaConf.load(path))


def _flat(path):
    return {k: v for k, v in _items(OmegaConf.to_container(OmegaConf.load(path), resolve=False))}


def _items(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _items(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


@pytest.mark.parametrize("other", ["llama3_8b/eabf_16k_redpajama_book.yaml", "mistral_7b/eabf_16k_redpajama_book.yaml"])
def test_other_base_models_differ_only_in_model(other):
    a = _flat(REPO / "configs/llama2_7b/eabf_8k_redpajama_book.yaml")
    b = _flat(REPO / "configs" / other)
    diff = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    allowed = ("model.", "tokenizer.", "checkpointer.checkpoint_files", "checkpointer.model_type", "seq_len",
               "validation.seq_len", "output_dir")
    assert all(k.startswith(allowed) for k in diff), sorted(diff)


def test_paper_configs_have_paper_settings():
    for p in (REPO / "configs/llama2_7b").glob("*.yaml"):
        c = OmegaConf.load(p)
        assert c.batch_size == 64 and c.max_steps == 200 and list(c.e_range) == [1, "L/2"], p
        assert c.loss.alpha == 0.1


STUDY_CONFIGS = sorted((REPO / "configs/study").glob("*.yaml"))


@pytest.mark.parametrize("path", STUDY_CONFIGS, ids=[p.name for p in STUDY_CONFIGS])
def test_tune_validate_refuses_study_configs_with_the_reason(path):
    # Study configs are not torchtune recipe configs; torchtune's check must say so, not "well-formed".
    from torchtune import config
    from torchtune.config._errors import ConfigError

    with pytest.raises(ConfigError) as err:
        config.validate(OmegaConf.load(path))
    assert "not a torchtune config" in str(err.value).lower()
    assert "python -m torchtune_longshort.study --config" in str(err.value)
    assert len(err.value.errors) == 1  # the marker only: the rest of the file is fine


def test_tune_validate_command_exits_nonzero_on_a_study_config():
    import os
    import subprocess
    import sys

    tune = str(Path(sys.executable).with_name("tune"))
    p = subprocess.run([tune, "validate", "configs/study/cpu_small.yaml"], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}, timeout=300)
    assert p.returncode != 0 and "well-formed!" not in p.stdout
    assert "torchtune-longshort study config" in p.stderr


def test_a_config_named_with_a_tilde_after_an_equals_sign_is_the_home_folders(tmp_path, monkeypatch):
    # `--config=~/study.yaml` (no shell expands a tilde after "="): "neither a file (relative to <cwd>) nor a
    # config this package ships", for the study, Table 1, the figures and longshort-validate
    from torchtune_longshort.configs_cli import resolve_config

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine.yaml").write_text("{}\n")
    assert resolve_config("~/mine.yaml", REPO, "--config") == tmp_path / "mine.yaml"

# ---------------------------------------------------------------- validation text held out from training text
STDLIB_SOURCES = ("torchtune_longshort.data.corpus.stdlib",
                  "torchtune_longshort.study.pretrain_mix.stdlib_with_passkeys")
STDLIB_FILTERS = ("min_bytes", "include_tests", "limit", "split")  # what picks the files (the rest orders or adds)


def _with_stdlib_validation():
    """(name, training node, validation node) of every shipped recipe config, and every run config a study writes,
    that trains and validates on the stdlib corpus."""
    from torchtune_longshort.study import load_study_config
    from torchtune_longshort.study.run_configs import RunConfigs

    configs = [(str(p.relative_to(REPO / "configs")), OmegaConf.to_container(OmegaConf.load(p), resolve=False))
               for p in CONFIGS]
    for path in (p for p in STUDY_CONFIGS if "recipe_config" in OmegaConf.load(p)):  # not table1's correlation
        cfg = load_study_config(path, repo_root=REPO)
        plan = RunConfigs(cfg, REPO, Path("/nonexistent/study"))
        runs = [("base", None)] * (not cfg.base.given) + [(r.key, r) for r in cfg.grid[:1]]
        configs += [(f"study/{path.name}:{key}", plan.recipe_config(key, run)) for key, run in runs]
    for name, c in configs:
        val = (c.get("validation") or {}).get("dataset") or {}
        if c["dataset"].get("_component_") in STDLIB_SOURCES and val.get("_component_") in STDLIB_SOURCES:
            yield name, c["dataset"], val


def _files(node):
    from torchtune_longshort.data.stdlib_corpus import stdlib_source_files

    return stdlib_source_files(**{k: v for k, v in node.items() if k in STDLIB_FILTERS and v is not None})


def test_validation_reads_no_file_or_document_that_training_reads():
    # The tiny configs validated on the first stdlib files of >= 100 kB, tests included: 3 of the 4 (_pydecimal.py,
    # the text validation read, first) are training files (its 60 steps reach them from about step 22): val_ce was
    # partly measured on training text. Their validation now reads the held-out split, training the train split.
    checked = []
    for name, train, val in _with_stdlib_validation():
        train_files, val_files = _files(train), _files(val)
        assert not [f.name for f in val_files if f in set(train_files)], name
        texts = {f.read_text(encoding="utf-8", errors="replace") for f in train_files}
        assert not [f for f in val_files if f.read_text(encoding="utf-8", errors="replace") in texts], name
        checked.append(name)
    assert "tiny/longshort_stdlib.yaml" in checked and "tiny/lora_from_checkpoint.yaml" in checked, checked


def test_a_validation_source_that_shares_training_files_is_warned_about(caplog, tmp_path):
    """The config check (longshort-validate and tune run) says it in one line: longshort-validate said OK to
    dataset.split=null on tiny/longshort_stdlib.yaml. The reference: the selections' own file lists."""
    import logging

    from torchtune_longshort.data.stdlib_corpus import stdlib_source_files
    from torchtune_longshort.training.recipe_config import load_recipe_config

    cfg = OmegaConf.load(REPO / "configs/tiny/longshort_stdlib.yaml")
    val = {k: v for k, v in cfg.validation.dataset.items() if k in STDLIB_FILTERS}
    cases = (({}, {"include_tests": False, "split": "train"}, None),
             ({"dataset": {"split": None}}, {"include_tests": False}, "validation.dataset.include_tests=only"),
             ({"dataset": {"include_tests": True, "split": None}}, {"include_tests": True},
              "dataset.split=train"))
    for over, train, fix in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="torchtune_longshort.training.recipe_config.validation_overlap"):
            load_recipe_config(OmegaConf.merge(cfg, over, {"output_dir": str(tmp_path / "out")}))  # not the README's
        said = [r.getMessage() for r in caplog.records if r.name.endswith("validation_overlap")]
        val_files = stdlib_source_files(**val)
        n = len(set(stdlib_source_files(**train)) & set(val_files))
        assert bool(said) == bool(n) == bool(fix), said
        if fix:
            assert len(said) == 1 and f"validation.dataset reads {n} of its {len(val_files)} files from" in said[0]
            assert f"hold them apart: {fix} (" in said[0]
    # a stdlib source that reads nothing is no fix (include_tests=only with split=train: the tests are held out);
    # the reference: the selections' file lists with the keys said applied, validation's non-empty and apart
    import yaml

    from torchtune_longshort.data.stdlib_overlap import selection_files
    from torchtune_longshort.training.recipe_config.validation_overlap import _stdlib_fix

    train = {"include_tests": True, "split": None, "limit": None, "min_bytes": 0}
    val = {**train, "split": "train"}
    sides = {"dataset": dict(train), "validation.dataset": dict(val)}
    for item in _stdlib_fix(train, val).split(" with "):
        key, value = item.split("=")
        sides[key.rsplit(".", 1)[0]][key.rsplit(".", 1)[1]] = yaml.safe_load(value)
    read = selection_files(sides["validation.dataset"])
    assert read and not read & selection_files(sides["dataset"]), sides


def test_the_commands_shipped_configs_and_the_study_help_show_run_from_a_wheel(tmp_path):
    # A wheel has no configs/ folder. Each shipped config's header and the study's and Table 1's --help showed
    # `--config configs/<name>.yaml`, which tune run and the study refused from a pip install ("no such file" /
    # "neither a file nor a config this package ships"). Now every `--config X` they show resolves from a folder
    # that is not the checkout: for the study commands a shipped name, for tune run the file a `longshort-cp NAME X`
    # before it wrote (NAME shipped); and no comment names a path under configs/. The installed recipe's docstrings
    # showed `--config configs/tiny/longshort_stdlib.yaml` and two config headers "tests/conftest.py's
    # tiny_llama2_dir": no text a wheel user reads names a checkout's configs/ or tests/ path.
    import re

    import torchtune_longshort.recipes.longshort_finetune as recipe
    import torchtune_longshort.study.__main__ as study_cli
    import torchtune_longshort.study.table1.__main__ as table1_cli
    from torchtune_longshort.configs_cli import resolve_config, shipped_configs

    texts = {f"{m.__name__} --help": m.__doc__ for m in (study_cli, table1_cli)}
    texts[recipe.__name__] = recipe.__doc__ + recipe.LongShortFinetuneRecipe.__doc__
    checkout_free = {*shipped_configs(), recipe.__name__}
    for path in sorted((REPO / "configs").rglob("*.yaml")):  # the files the wheel ships as torchtune_longshort.configs
        texts[str(path.relative_to(REPO / "configs"))] = "\n".join(
            x for x in path.read_text().splitlines() if x.lstrip().startswith("#"))
    bad = []
    for where, text in texts.items():
        copied = {dest for src, dest in re.findall(r"longshort-cp (\S+) (\S+)", text)}
        bad += [f"{where}: longshort-cp {src}" for src, _ in re.findall(r"longshort-cp (\S+) (\S+)", text)
                if src not in shipped_configs()]
        for line in text.splitlines():
            wrong = (where in checkout_free and "configs/" in line) or "tests/" in line
            for value in re.findall(r"--config (\S+)", line):
                if "tune run" in line:
                    wrong |= value not in copied
                elif "torchtune_longshort.study" in line:
                    try:
                        resolve_config(value.strip("`"), tmp_path, "--config")
                    except ValueError:
                        wrong = True
            if wrong:
                bad.append(f"{where}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_a_typo_of_a_shipped_config_name_names_the_config(tmp_path, monkeypatch):
    # `tune run ... --config smollm2_135m/yarn_16k_stdlb.yaml` advised `longshort-cp tiny/longshort_stdlib.yaml
    # yarn_16k_stdlb.yaml` (the tiny config under the typo's name); longshort-cp listed all 23 names, no nearest one
    from torchtune_longshort.configs_cli import config_path, nearest_shipped, resolve_config
    from torchtune_longshort.training.recipe_config.validate import read_config_file

    monkeypatch.chdir(tmp_path)
    assert nearest_shipped("smollm2_135m/yarn_16k_stdlb.yaml") == "smollm2_135m/yarn_16k_stdlib.yaml"
    assert nearest_shipped("smollm2_135m/yarn_16k_stdlib.yaml") is None and nearest_shipped("my_run.yaml") is None
    with pytest.raises(FileNotFoundError, match=r"no such file \(did you mean the shipped 'smollm2_135m/yarn_16k_"
                                                r"stdlib.yaml'\?\); .* longshort-cp smollm2_135m/yarn_16k_stdlib.yaml "
                                                r"yarn_16k_stdlib.yaml"):
        read_config_file(Path("smollm2_135m/yarn_16k_stdlb.yaml"))
    with pytest.raises(FileNotFoundError, match=r"longshort-cp tiny/longshort_stdlib.yaml my_run.yaml"):
        read_config_file(Path("my_run.yaml"))  # no shipped name near: the tiny example, under the name given
    with pytest.raises(FileNotFoundError, match=r"no shipped config 'smollm2_135m/lora_yarn_16k_stdlb.yaml' \(did you "
                                                r"mean 'smollm2_135m/lora_yarn_16k_stdlib.yaml'\?\)"):
        config_path("smollm2_135m/lora_yarn_16k_stdlb")
    with pytest.raises(ValueError, match=r"\(e\.g\. study/cpu_small.yaml\)"):
        resolve_config("study/cpu_smal.yaml", tmp_path, "--config")


@pytest.mark.parametrize("module", ["torchtune_longshort.configs_cli", "torchtune_longshort.metrics.cli",
                                    "torchtune_longshort.training.recipe_config.validate",
                                    "torchtune_longshort.eval.report.build", "torchtune_longshort.models.gguf"])
def test_each_commands_help_ends_with_examples_that_use_its_own_options(module, capsys):
    # longshort-cp, longshort-misalignment, longshort-validate, longshort-eval-report and the GGUF converter's
    # --help showed no example (the README's were the only ones; the study's and synthetic's have theirs); now each
    # ends with examples, every option they use one the command takes, every shipped config they name shipped
    import importlib
    import re

    from torchtune_longshort.configs_cli import shipped_configs

    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(module).main(["--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0 and "\nexamples:\n" in text, text
    head, examples = text.split("\nexamples:\n")
    lines = [x.split("#")[0] for x in examples.splitlines() if x.strip()]
    assert lines
    for line in lines:
        for flag in re.findall(r"(?<=\s)--[\w-]+", line):
            assert re.search(rf"(?<![\w-]){flag}(?![\w-])", head), (flag, line)
        named = [w for w in line.split() if re.fullmatch(r"[a-z0-9_]+/[\w.]+\.yaml", w) and not w.startswith("runs/")]
        assert set(named) <= set(shipped_configs()), line


def test_a_config_name_near_none_is_offered_the_readmes_first_config(tmp_path):
    # `longshort-validate nope.yaml` offered `e.g. gemma_2b/pi_16k_redpajama_book.yaml` (the first alphabetically);
    # it now offers the config the README's first `longshort-cp` copies (the reference)
    import re

    from torchtune_longshort.training.recipe_config.validate import validate

    first = re.search(r"longshort-cp (\S+\.yaml) ", (REPO / "README.md").read_text()).group(1)
    with pytest.raises(ValueError) as refused:
        validate(str(tmp_path / "nope.yaml"), [])
    assert f"(e.g. {first})" in str(refused.value), str(refused.value)
