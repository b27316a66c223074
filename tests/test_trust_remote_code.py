"""A checkpoint's config.json names code by a dotted path (``longshort_family``, ``longshort_rope.method``), which the
readers of someone's checkpoint imported without asking: ``longshort-eval --model longshort --model_args
pretrained=THEIR_FOLDER`` ran the top-level code of any module the folder named. As transformers asks
``trust_remote_code=True`` for a checkpoint's ``auto_map``, a path outside the package is now refused before it is
imported (the module's side effect, a marker file, is the independent witness), and imported with the flag; shipped
paths need none. The recipe's start folder (``checkpointer.checkpoint_dir=THEIR_FOLDER``) is someone's folder too
(transformers' ``from_pretrained`` asks in one's own training script): its config check imported the code it named
without asking; it is refused now unless ``checkpointer.trust_remote_code: true``, or the config names the path
itself."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from trust_gate import FAMILY_PATH, MODULE, PKG, ROPE_PATH, _folder_naming, _imported, _linear_scaled
from user_modules import forget_user_module

from torchtune_longshort.models import load_hf_checkpoint


def test_a_rope_method_a_checkpoint_names_is_imported_only_when_trusted(marker, tiny_llama2_dir, tmp_path):
    _linear_scaled(tiny_llama2_dir, tmp_path / "theirs", ROPE_PATH)  # a process that never imported it
    with pytest.raises(ValueError) as e:
        load_hf_checkpoint(tmp_path / "theirs")
    assert str(e.value) == (
        f"{tmp_path / 'theirs' / 'config.json'}: longshort_rope.method={ROPE_PATH!r} names code outside "
        f"torchtune_longshort (in {PKG}), which reading this checkpoint would import, running top-level code of "
        f"{PKG}: not imported; if you trust this checkpoint and {PKG}, pass trust_remote_code=True to "
        "load_hf_checkpoint")
    assert not _imported(marker)
    back = load_hf_checkpoint(tmp_path / "theirs", trust_remote_code=True)
    assert marker.read_text() == "imported" and back.rope_scaling["method"] == ROPE_PATH


def test_a_path_into_a_class_is_refused_naming_its_package_not_a_module(marker, tiny_llama2_dir, tmp_path):
    """A dotted path may name an attribute inside a class (c708ab7): 'gate_pkg.mine.Holder.MYLLAMA' was refused
    '(module gate_pkg.mine.Holder) ... if you trust this checkpoint and gate_pkg.mine.Holder', naming a class a
    module; nothing is imported to tell, so the package one installs and trusts is named."""
    nested = f"{MODULE}.Holder.MYLLAMA"
    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=nested)
    with pytest.raises(ValueError) as e:
        load_hf_checkpoint(folder)
    assert str(e.value) == (
        f"{folder / 'config.json'}: longshort_family={nested!r} names code outside torchtune_longshort (in {PKG}), "
        f"which reading this checkpoint would import, running top-level code of {PKG}: not imported; if you trust "
        f"this checkpoint and {PKG}, pass trust_remote_code=True to load_hf_checkpoint")
    assert not _imported(marker)
    load_hf_checkpoint(folder, trust_remote_code=True)
    assert isinstance(sys.modules[MODULE].Holder, type)  # what the parent called a module is a class


def test_the_eval_model_refuses_a_family_a_checkpoint_names_unless_trusted(
        marker, tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.model.args import parse_model_args

    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    given = dict(pretrained=str(folder), tokenizer=str(sp_tokenizer_dir), device="cpu", max_length=64)
    with pytest.raises(ValueError, match=rf"config.json: longshort_family='{FAMILY_PATH}' names code outside .* pass "
                                         r"trust_remote_code=True in --model_args \(or lm-eval's --trust_remote_code"):
        parse_model_args(**given)
    assert not _imported(marker)
    args = parse_model_args(**given, trust_remote_code="true")  # as lm-eval's --trust_remote_code hands it
    assert marker.exists() and args.folder.family.name == FAMILY_PATH and args.trust_remote_code


def test_shipped_paths_and_the_users_own_config_need_no_flag(marker, tiny_llama2_dir, tmp_path):
    from torchtune_longshort.models.families import family_named

    shipped = _linear_scaled(tiny_llama2_dir, tmp_path / "shipped", "torchtune_longshort.rope.linear.LinearRoPE")
    assert load_hf_checkpoint(shipped).rope_scaling["factor"] == 2.0
    assert family_named(FAMILY_PATH).name == FAMILY_PATH and marker.exists()  # model.family of one's own YAML
    # imported already in this process (the user's own code): reading a folder that names it runs nothing new
    folder = _folder_naming(tiny_llama2_dir, tmp_path / "own", longshort_family=FAMILY_PATH)
    assert getattr(load_hf_checkpoint(folder), "rope_scaling", None) is None


def test_longshort_eval_refuses_in_one_line_before_lm_eval_starts(marker, tiny_llama2_dir, tmp_path, capsys,
                                                                 monkeypatch):
    from torchtune_longshort.eval.__main__ import main

    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run", "--model", "longshort", "--model_args",
                                      f"pretrained={folder}", "--tasks", "longshort_ppl", "--device", "cpu",
                                      "--output_path", str(tmp_path / "eval")])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "longshort_family=" in err and "trust_remote_code" in err
    assert not _imported(marker) and not (tmp_path / "eval").exists()


def test_table1_trusts_the_checkpoint_its_yaml_names(marker, tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """Table 1's cells evaluate the ``checkpoint_dir`` its YAML's author named (as a study's given base): a family of
    one's own that folder records is imported, not refused in the cells' dry check."""
    from torchtune_longshort.study.table1.config import load_table1_config
    from torchtune_longshort.study.table1.runner import Table1

    folder = _folder_naming(tiny_llama2_dir, tmp_path / "mine", longshort_family=FAMILY_PATH)
    for f in sp_tokenizer_dir.iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    raw = {"name": "tiny", "checkpoint_dir": str(folder), "L0": 256, "lengths": [384],
           "variants": {v: {"method": m} for v, m in
                        [("base", "default"), ("pi", "linear"), ("ntk", "ntk"), ("yarn", "yarn")]}}
    (tmp_path / "t1.yaml").write_text(json.dumps(raw))
    t1 = Table1(load_table1_config(tmp_path / "t1.yaml", repo_root=tmp_path), output_dir=tmp_path / "out",
                repo_root=tmp_path)
    t1.check_cells()
    assert marker.exists() and not (tmp_path / "out").exists()


def test_the_recipe_refuses_a_start_folders_code_unless_its_config_trusts_it(marker, tiny_llama2_dir,
                                                                              sp_tokenizer_dir, tmp_path):
    from recipe_config import make_cfg

    from torchtune_longshort.training.recipe_config import load_recipe_config

    folder = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    out = tmp_path / "run"
    with pytest.raises(ValueError) as info:  # tune run and longshort-validate: exit 2, this line
        load_recipe_config(make_cfg(folder, sp_tokenizer_dir, out))
    said = str(info.value)
    assert said.startswith(f"{folder.resolve()}/config.json: longshort_family='{FAMILY_PATH}' names code outside "
                           "torchtune_longshort") and "\n" not in said
    assert said.endswith(f"if you trust this checkpoint and {PKG}, pass checkpointer.trust_remote_code=true on the "
                         "command line (or checkpointer.trust_remote_code: true in the config)")
    assert not _imported(marker) and not out.exists()
    config = load_recipe_config(make_cfg(folder, sp_tokenizer_dir, out, **{"checkpointer.trust_remote_code": True}))
    assert config.checkpointer.trust_remote_code is True and marker.exists() and not out.exists()
    # the config's own path (model.family) is the user's choice: no key needed (a new process, a new folder)
    forget_user_module(PKG)
    marker.unlink()
    other = _folder_naming(tiny_llama2_dir, tmp_path / "theirs_too", longshort_family=FAMILY_PATH)
    load_recipe_config(make_cfg(other, sp_tokenizer_dir, out, **{"model.family": FAMILY_PATH}))
    assert marker.exists() and not out.exists()


def test_a_study_trusts_a_given_base_that_names_code_and_writes_no_key_otherwise(marker, tiny_llama2_dir, tmp_path):
    """A study's YAML names its base (its evaluations trust it): a fine-tune from a given base whose config.json
    names a family of one's own gets checkpointer.trust_remote_code, which the recipe would otherwise refuse; a
    base naming none gets no key, so an older study's recipe.yaml stays the same (a changed one retrains)."""
    from study_helpers import _study

    theirs = _folder_naming(tiny_llama2_dir, tmp_path / "theirs", longshort_family=FAMILY_PATH)
    plain = _folder_naming(tiny_llama2_dir, tmp_path / "plain")
    for base, want in ((theirs, {"trust_remote_code": True}), (plain, {})):
        study, _ = _study(tmp_path / base.name, base={"checkpoint_dir": str(base)}, methods={"pi": {"method": "linear"}},
                          alphas=[0, 0.1], seeds=[0],
                          model={"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": None})
        run = study.cfg.grid[0]
        checkpointer = study.recipe_config(run.key, run)["checkpointer"]
        assert {k: v for k, v in checkpointer.items() if k == "trust_remote_code"} == want
