"""Every config in configs/ (ours: not synthetic/ or study/) passes torchtune's own validation, the study configs
are refused by it with the reason, and the other base models' configs differ from the Llama-2 one only where the
model differs."""

from __future__ import annotations

import os
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


def test_longshort_cp_refuses_a_destination_in_a_missing_folder_in_one_line(tmp_path, capsys):
    # `longshort-cp NAME nodir/x.yaml` printed a FileNotFoundError traceback from shutil; now one line naming the
    # folder, exit 2, and nothing created.
    from torchtune_longshort.configs_cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "nodir" / "x.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and "nodir" in err and "mkdir -p" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    # a destination folder that is a file was told to be made (`mkdir -p x.yaml`, which fails)
    (tmp_path / "x.yaml").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "x.yaml" / "sub.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "x.yaml is a file, not a folder" in err and "mkdir" not in err, err
    assert (tmp_path / "x.yaml").read_text() == "mine"
    # `DEST/` names a folder, as cp reads it: a missing one wrote a FILE named DEST
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "nd") + "/"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "nd does not exist" in err and "mkdir -p" in err, err
    assert not (tmp_path / "nd").exists()
    (tmp_path / "nd").mkdir()
    assert main(["tiny/longshort_stdlib.yaml", str(tmp_path / "nd") + "/"]) == 0
    assert (tmp_path / "nd" / "longshort_stdlib.yaml").is_file()



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


def test_a_validation_source_that_shares_training_files_is_warned_about(sp_tokenizer_dir, caplog):
    import logging

    from torchtune_longshort.training.bootstrap import stdlib_sentencepiece_tokenizer
    from torchtune_longshort.training.data_setup import build_documents, shared_files, validation_sequences
    from torchtune_longshort.training.recipe_config import load_recipe_config

    tok = stdlib_sentencepiece_tokenizer(str(sp_tokenizer_dir / "tokenizer.model"))
    cfg = OmegaConf.load(REPO / "configs/tiny/longshort_stdlib.yaml")
    cfg.validation.num_sequences, cfg.validation.seq_len = 1, 64
    for over, warned in (({}, False), ({"split": None, "include_tests": True}, True)):
        node = OmegaConf.merge(cfg, {"validation": {"dataset": over}})
        fields = load_recipe_config(node, local=False)
        training = build_documents(fields.dataset, tok)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="torchtune_longshort.training.data_setup"):
            validation_sequences(fields.validation, tok, lambda t: tok.encode(t), None, training)
        said = [r.getMessage() for r in caplog.records]
        assert bool(said) == warned, said
        if warned:
            n = len(shared_files(training, build_documents(fields.validation.dataset, tok)))
            assert len(said) == 1 and f"validation.dataset reads {n} of its 4 files from dataset's" in said[0] and n
            assert "dataset.split=train and validation.dataset.split=heldout" in said[0]


def test_longshort_cp_refuses_a_link_to_nothing_without_force(tmp_path, capsys):
    # `longshort-cp NAME link.yaml`, link.yaml a symbolic link whose target is gone: exists() is False for it, so the
    # copy replaced the user's link with a file, without --force
    from torchtune_longshort.configs_cli import main

    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "gone.yaml")
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(link)])
    assert exit_info.value.code == 2 and "exists (a symbolic link to " in capsys.readouterr().err
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["link.yaml"]


def test_longshort_cp_takes_tune_cps_flags(tmp_path, capsys):
    # `longshort-cp NAME runs/a/run.yaml --make-parents` and `-n` (tune cp's flags) were "unrecognized arguments",
    # and `longshort-cp NAME my_run` wrote a file without .yaml (tune cp writes my_run.yaml)
    from torchtune_longshort.configs_cli import config_path, main

    shipped = config_path("tiny/longshort_stdlib.yaml").read_text()
    assert main(["tiny/longshort_stdlib.yaml", str(tmp_path / "runs" / "a" / "run.yaml"), "--make-parents"]) == 0
    assert (tmp_path / "runs" / "a" / "run.yaml").read_text() == shipped
    assert main(["tiny/longshort_stdlib.yaml", str(tmp_path / "my_run")]) == 0
    assert (tmp_path / "my_run.yaml").read_text() == shipped and not (tmp_path / "my_run").exists()
    (tmp_path / "mine.yaml").write_text("mine")
    capsys.readouterr()
    assert main(["tiny/longshort_stdlib.yaml", str(tmp_path / "mine.yaml"), "-n"]) == 0
    assert "not overwriting" in capsys.readouterr().out and (tmp_path / "mine.yaml").read_text() == "mine"
    with pytest.raises(SystemExit) as exit_info:  # without the flag: one line naming it, nothing made
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "new" / "run.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--make-parents" in err and not (tmp_path / "new").exists(), err


def test_longshort_cp_list_refuses_a_copy_asked_with_it(tmp_path, capsys):
    # `longshort-cp --list tiny/longshort_stdlib.yaml run.yaml` listed and copied nothing, exit 0 (an audit)
    from torchtune_longshort.configs_cli import main

    for extra in (["tiny/longshort_stdlib.yaml", str(tmp_path / "run.yaml")], ["--force"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["--list", *extra])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and "--list takes nothing else (" in err, err
    assert not any(tmp_path.iterdir())


def test_shipped_configs_are_found_where_the_package_is_imported_from_its_checkout(tmp_path, monkeypatch, capsys):
    # A checkout's package shadowing a non-editable install (`python -m torchtune_longshort.study --config
    # configs/study/cpu_small.yaml` run in the checkout), or PYTHONPATH=. with no install, has no data package
    # torchtune_longshort.configs: every shipped name (the study configs' `recipe_config: tiny/...`, longshort-cp,
    # the figures' --config) ended in a ModuleNotFoundError traceback. The checkout's configs/ is that package's source.
    from importlib import resources

    import torchtune_longshort.configs_cli as cli

    files = resources.files

    def not_installed(package):
        if package == "torchtune_longshort.configs":
            raise ModuleNotFoundError(f"No module named {package!r}")
        return files(package)

    monkeypatch.setattr(cli.resources, "files", not_installed)
    assert cli.shipped_configs() == sorted(
        str(p.relative_to(REPO / "configs")) for p in (REPO / "configs").rglob("*.yaml"))
    assert cli.resolve_config("tiny/longshort_stdlib.yaml", tmp_path, "--config") == (
        REPO / "configs" / "tiny" / "longshort_stdlib.yaml")
    # a checkout's path, as the reports record the commands run there (`--config configs/study/...`): from a wheel it
    # was "neither a file ... (e.g. tiny/longshort_stdlib.yaml)", a recipe config offered for a study
    assert cli.resolve_config("configs/study/cpu_small.yaml", tmp_path, "--config") == (
        REPO / "configs" / "study" / "cpu_small.yaml")
    with pytest.raises(ValueError, match=r"e\.g\. study/"):
        cli.resolve_config("configs/study/cpu_smal.yaml", tmp_path, "--config")
    assert cli.main(["study/cpu_small.yaml", str(tmp_path)]) == 0
    assert (tmp_path / "cpu_small.yaml").read_text() == (REPO / "configs" / "study" / "cpu_small.yaml").read_text()
    # neither installed nor beside the package: one line, exit 2
    monkeypatch.setattr(cli, "SOURCE_CONFIGS", tmp_path / "no_configs")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--list"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "pip install ." in err, err
    with pytest.raises(ValueError, match="neither a file"):
        cli.resolve_config("tiny/longshort_stdlib.yaml", tmp_path, "--config")


def test_a_listing_whose_reader_left_ends_quietly_and_another_broken_pipe_keeps_its_traceback():
    # `longshort-cp --list | head -1`: the reader gone, the listing's write (or the exit's flush) raised
    # BrokenPipeError: "Exception ignored ... BrokenPipeError" on stderr. Now no output, exit 141 (128 + SIGPIPE).
    import os
    import subprocess
    import sys

    from torchtune_longshort.refusals import quiet_when_the_reader_leaves

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before the first line
    try:
        p = subprocess.run([str(Path(sys.executable).parent / "longshort-cp"), "--list"], stdout=write_end,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (p.returncode, p.stderr) == (141, "")

    def child_pipe_broke():
        raise BrokenPipeError("a child process's stdin")

    with pytest.raises(BrokenPipeError):  # this process's stdout is fine: not the reader leaving
        quiet_when_the_reader_leaves(child_pipe_broke)()


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


def test_longshort_cp_refuses_a_dash_for_a_destination(tmp_path, monkeypatch, capsys):
    # `longshort-cp NAME -` (standard output, by cat's habit) wrote a file named -.yaml in the working folder, as
    # `tune cp NAME -` does; it is refused in one line, nothing written
    from torchtune_longshort.configs_cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", "-"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "'-' is not standard output" in err, err
    assert not any(tmp_path.iterdir())
    assert main(["tiny/longshort_stdlib.yaml", "./-"]) == 0 and (tmp_path / "-.yaml").is_file()  # asked by its path


def test_longshort_cp_refuses_a_name_without_a_destination_in_one_line(tmp_path, monkeypatch, capsys):
    # `longshort-cp tiny/longshort_stdlib.yaml` (no DEST) ended in a TypeError traceback, exit 1; tune cp says
    # 'the following arguments are required: destination', exit 2 by argparse
    from torchtune_longshort.configs_cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err == "longshort-cp: error: give a destination: longshort-cp NAME DEST\n"
    assert not any(tmp_path.iterdir())


def _linked_folder(folder, link, target, target_there):
    """``folder`` made, holding ``link`` -> ``target`` (relative), the target a user's file ("mine") or absent."""
    folder.mkdir()
    if target_there:
        (folder / target).write_text("mine\n")
    (folder / link).symlink_to(target)
    return folder


@pytest.mark.parametrize("target_there", [True, False], ids=["link_to_a_file", "link_to_nothing"])
def test_longshort_cp_force_writes_through_a_link_as_tune_cp_does(tmp_path, capsys, target_there):
    # `ln -s real.yaml l.yaml; longshort-cp tiny/longshort_stdlib.yaml l.yaml --force` replaced the user's link with a
    # plain file and left real.yaml stale; `tune cp llama2/7B_full l.yaml` writes the file the link points to, the link
    # kept (walked): its copy is shutil.copy(src, destination) (torchtune/_cli/cp.py), the reference, run here on its
    # own folder (importing torchtune for tune cp itself takes seconds)
    import shutil

    from torchtune_longshort.configs_cli import config_path, main

    def made(tool, argv):
        folder = _linked_folder(tmp_path / tool, "l.yaml", "real.yaml", target_there)
        argv(str(folder / "l.yaml"))
        return folder, (folder / "l.yaml").is_symlink() and os.readlink(folder / "l.yaml"), sorted(os.listdir(folder))

    source = config_path("tiny/longshort_stdlib.yaml")
    _, *tune_seen = made("tune", lambda dest: shutil.copy(source, dest))
    ours_folder, *ours_seen = made("ours", lambda dest: main(["tiny/longshort_stdlib.yaml", dest, "--force"]))
    assert ours_seen == tune_seen == ["real.yaml", ["l.yaml", "real.yaml"]]
    written = (ours_folder / "real.yaml").read_text()
    assert written == (tmp_path / "tune" / "real.yaml").read_text() == source.read_text()
    assert "through the link, into" in capsys.readouterr().out
    if target_there:  # without --force: refused, naming the link's file, nothing written
        (ours_folder / "real.yaml").write_text("mine\n")
        with pytest.raises(SystemExit) as exit_info:
            main(["tiny/longshort_stdlib.yaml", str(ours_folder / "l.yaml")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"a symbolic link to {ours_folder / 'real.yaml'}" in err, err
        assert (ours_folder / "real.yaml").read_text() == "mine\n"


@pytest.mark.parametrize("target_there", [False, True])
def test_longshort_cp_no_clobber_writes_through_a_link_to_nothing_as_tune_cp_does(tmp_path, capsys, target_there):
    # `ln -s gone.yaml d.yaml; longshort-cp tiny/longshort_stdlib.yaml d.yaml -n` said 'exists, not overwriting', where
    # `tune cp -n` writes gone.yaml through the link (walked): its rule, `if args.no_clobber and destination.exists()`
    # (leave it) else shutil.copy (torchtune/_cli/cp.py), the reference, run here on its own folder
    import shutil

    from torchtune_longshort.configs_cli import config_path, main

    def made(tool, argv):
        folder = _linked_folder(tmp_path / tool, "d.yaml", "gone.yaml", target_there)
        assert argv(folder / "d.yaml") == 0
        texts = {p.name: p.read_text() for p in folder.iterdir() if p.exists()}
        return (folder / "d.yaml").is_symlink(), sorted(os.listdir(folder)), texts

    source = config_path("tiny/longshort_stdlib.yaml")
    tune_seen = made("tune", lambda dest: 0 if dest.exists() else shutil.copy(source, dest) and 0)
    ours_seen = made("ours", lambda dest: main(["tiny/longshort_stdlib.yaml", str(dest), "-n"]))
    assert ours_seen == tune_seen
    assert tune_seen[2]["gone.yaml"] == ("mine\n" if target_there else source.read_text())
    out = capsys.readouterr().out
    assert ("not overwriting" in out) == target_there, out


def test_longshort_cp_refuses_a_link_loop_in_one_line(tmp_path, capsys):
    from torchtune_longshort.configs_cli import main

    (tmp_path / "a.yaml").symlink_to("b.yaml")
    (tmp_path / "b.yaml").symlink_to("a.yaml")
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", str(tmp_path / "a.yaml"), "--force"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "a symbolic link in a loop" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]
    assert all(p.is_symlink() for p in tmp_path.iterdir())


def test_a_config_name_near_none_is_offered_the_readmes_first_config(tmp_path):
    # `longshort-validate nope.yaml` offered `e.g. gemma_2b/pi_16k_redpajama_book.yaml` (the first alphabetically);
    # it now offers the config the README's first `longshort-cp` copies (the reference)
    import re

    from torchtune_longshort.training.recipe_config.validate import validate

    first = re.search(r"longshort-cp (\S+\.yaml) ", (REPO / "README.md").read_text()).group(1)
    with pytest.raises(ValueError) as refused:
        validate(str(tmp_path / "nope.yaml"), [])
    assert f"(e.g. {first})" in str(refused.value), str(refused.value)
