"""The typed study config: built once (the grid with it), frozen, written back as the mapping it was read from
(what study.json and each run's result.json spec record), every field documented, and the quick overlay's keys
refused even when --quick is not asked for."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.study import Study, StudyConfig, StudyConfigError, load_study_config

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "configs/study"


def _write(tmp_path, change):
    raw = yaml.safe_load((STUDIES / "cpu_small.yaml").read_text())
    change(raw)
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def test_built_once_frozen_and_the_grid_with_it():
    cfg = load_study_config(STUDIES / "cpu_medium.yaml", repo_root=ROOT)
    assert cfg.grid is cfg.grid and cfg.main_grid == [r for r in cfg.grid if r.variant is None]
    assert [r.key for r in cfg.runs_of("pi", 0.1)] == ["pi_a0.1_s0", "pi_a0.1_s1", "pi_a0.1_s2"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seeds = [0]
    one_seed = dataclasses.replace(cfg, seeds=[0])  # a changed config is a new one, with its own grid
    assert len(one_seed.grid) * 3 == len(cfg.grid) and {r.seed for r in one_seed.grid} == {0}


@pytest.mark.parametrize("name", ["cpu_small", "cpu_medium", "gpu_medium", "llama2_7b_clex"])
@pytest.mark.parametrize("quick", [False, True])
def test_the_record_is_the_config(name, quick):
    cfg = load_study_config(STUDIES / f"{name}.yaml", quick=quick, repo_root=ROOT)
    again = StudyConfig.from_mapping(cfg.to_dict())
    assert again == cfg and [r.key for r in again.grid] == [r.key for r in cfg.grid]


def test_defaults_are_filled_by_their_owners():
    raw = {"name": "s", "recipe_config": "configs/tiny/longshort_stdlib.yaml", "L0": 128, "L": 256,
           "base": {"pretrain": {"max_steps": 1}}, "model": {"_component_": "torchtune.models.llama2.llama2"},
           "finetune": {"max_steps": 1}, "methods": {"pi": {"method": "linear"}}, "alphas": [0.1, 0], "seeds": [0]}
    cfg = StudyConfig.from_mapping(raw)
    from torchtune_longshort.metrics.misalignment import DEFAULT_NUM_SAMPLES

    assert cfg.alphas == [0.0, 0.1] and cfg.output_dir == "outputs/study/s" and cfg.jobs == 1
    assert (cfg.eval.ppl_lengths, cfg.eval.passkey_lengths, cfg.eval.max_length) == ([128, 256, 512, 1024],
                                                                                     [256, 512, 1024], 1024)
    assert cfg.eval.mis_num_samples == DEFAULT_NUM_SAMPLES and cfg.base.gate_measure == "sequence"
    assert cfg.variants.items() == [] and cfg.base.pretrain.overrides == {}


def test_a_run_spec_keeps_the_keys_result_json_has_always_recorded(tmp_path):
    # a result.json whose spec differs from the current one is redone: the eval keys must stay as they were
    no_haystack = _write(tmp_path, lambda raw: (raw["eval"]["babilong"].pop("haystack"), raw["eval"].pop("metadata")))
    keys = {"lengths", "depths", "n", "qa"}
    always = {"ppl_lengths", "passkey_lengths", "misalignment_lengths", "ppl_num_samples", "passkey_num_samples",
              "mis_num_samples", "ppl_source", "batch_size", "device", "dtype", "babilong", "longbench_e_data_dir",
              "include_path", "max_length"}
    for path, babilong, extra in ((STUDIES / "cpu_small.yaml", keys | {"haystack"}, {"metadata"}),
                                  (no_haystack, keys, set())):
        cfg = load_study_config(path, repo_root=ROOT)
        ev = Study(cfg, output_dir=tmp_path, repo_root=ROOT).spec_of("base")["eval"]
        assert set(ev) == always | extra  # metadata only where the config sets it (cpu_small: mis_source)
        assert set(ev["babilong"]) == babilong  # haystack only where the config sets it


def test_every_field_has_a_doc():
    from dataclasses import fields

    todo, seen = [StudyConfig], []
    while todo:
        cls = todo.pop()
        seen.append(cls.__name__)
        for f in fields(cls):
            assert f.metadata.get("doc"), f"{cls.__name__}.{f.name} has no doc"
            if f.metadata["section"] is not None:
                todo.append(f.metadata["section"])
    assert {"BaseConfig", "PretrainConfig", "FinetuneConfig", "EvalConfig", "BabilongConfig", "Variants",
            "ERangeVariant", "DivergenceVariant", "EqualComputeVariant"} <= set(seen)


def _quick_eval_key(raw):
    raw["quick"]["eval"]["ppl_num_sample"] = 1


def _quick_method(raw):
    raw["quick"]["methods"]["clex"]["method"] = "clexx"


def _variant_name(raw):
    raw["variants"] = {"e_rang": {"method": "pi", "alpha": 0.1, "ranges": [[1, "L/4"]]}}


def _variant_key(raw):
    raw["variants"] = {"divergence": {"method": "pi", "alpha": 0.1, "divergences": ["js"]}}


def _metadata_value(raw):
    raw["eval"]["metadata"] = {"ppl_source": "stdlb"}


def _variant_method(raw):
    raw["variants"] = {"equal_compute": {"method": "rope", "alpha": 0.1, "overhead": 1.05}}


@pytest.mark.parametrize("change, needle", [
    (_quick_eval_key, "'quick.eval.ppl_num_sample' (did you mean 'ppl_num_samples'?)"),
    (_quick_method, "quick.methods.clex.method='clexx' is not a RoPE method (did you mean 'clex'?)"),
    (_variant_name, "'variants.e_rang' (did you mean 'e_range'?)"),
    (_variant_key, "'variants.divergence.alpha' (did you mean 'alphas'?)"),
    (_variant_method, "variants.equal_compute.method='rope' must name one of methods"),
    (_metadata_value, "eval.metadata.ppl_source='stdlb' is not a source; accepted: stdlib"),  # each evaluation: NaN
])
def test_refused_without_quick_with_the_field_named(tmp_path, change, needle):
    with pytest.raises(StudyConfigError, match=re.escape(needle)):
        load_study_config(_write(tmp_path, change), repo_root=ROOT)


def _full_alphas_without_0(raw):
    raw["alphas"] = [0.1]


def _repeated_alpha(raw):
    raw["quick"]["alphas"] = [0, 0]


@pytest.mark.parametrize("change, quick, needle", [
    # the full study under --quick: CI runs --quick, and a broken full config passed it
    (_full_alphas_without_0, True, "study (full variant) config: alphas=[0.1] must include 0"),
    # a run named twice: with --jobs 2 both trained at once in one folder, one FAILED, the study exited 0
    (_repeated_alpha, True, "alphas=[0, 0] repeats 0: give each once"),
])
def test_the_full_study_is_checked_under_quick_and_a_run_is_named_once(tmp_path, change, quick, needle):
    with pytest.raises(StudyConfigError, match=re.escape(needle)):
        load_study_config(_write(tmp_path, change), quick=quick, repo_root=ROOT)


def test_a_model_that_does_not_fit_the_given_base_is_refused_by_the_config_check(tmp_path, tiny_llama2_dir):
    # cpu_small's model dimensions against another checkpoint as its base: the study wrote its folder, then every
    # fine-tune refused them ("model dimensions differ from the start checkpoint") and the study exited 1
    def given_base(raw):
        raw["base"] = {"checkpoint_dir": str(tiny_llama2_dir), "tokenizer": str(tiny_llama2_dir)}

    with pytest.raises(StudyConfigError, match=r"the recipe config of run \w+ .* model dimensions differ from the start "
                                               r"checkpoint checkpointer.checkpoint_dir=.*model.embed_dim="):
        load_study_config(_write(tmp_path, given_base), repo_root=ROOT)


def test_exponent_numbers_are_read_as_tune_run_reads_them(tmp_path):
    """``lr: 3e-4`` (torchtune's configs' spelling) is a float to ``tune run`` (``OmegaConf.load``); the study read its
    own YAML with plain YAML 1.1, where it is the string '3e-4': the study refused its own config ("optimizer.lr='3e-3'
    is not accepted: expected a finite number >= 0"), and a Table-1 variant's ``new_base: 1e6`` went on as a word."""
    from torchtune_longshort.study.table1.config import load_table1_config

    text = (STUDIES / "cpu_small.yaml").read_text().replace("lr: 3.0e-3", "lr: 3e-3").replace("lr: 1.0e-3", "lr: 1e-3")
    assert text.count("lr: 3e-3") == 1 and text.count("lr: 1e-3") == 1
    (tmp_path / "study.yaml").write_text(text)
    cfg = load_study_config(tmp_path / "study.yaml", repo_root=ROOT)
    assert cfg.recipe_overrides["optimizer"]["lr"] == 3e-3 and cfg.finetune.overrides["optimizer"]["lr"] == 1e-3
    text = (STUDIES / "table1_smollm2.yaml").read_text().replace("new_base: 1000000", "new_base: 1e6")
    (tmp_path / "table1.yaml").write_text(text)
    params = load_table1_config(tmp_path / "table1.yaml", repo_root=ROOT).variants["abf"]
    assert "new_base: 1e6" in text and params.kwargs == {"new_base": 1e6}, params


def test_a_config_that_is_not_valid_yaml_is_one_line(tmp_path):
    """A study config that is not valid YAML ended in PyYAML's traceback (exit 1); now the study's one-line refusal
    naming the file."""
    bad = tmp_path / "study.yaml"
    bad.write_text("name: x\nruns: [\n")
    with pytest.raises(StudyConfigError, match=rf"study config '{re.escape(str(bad))}' is not valid YAML: .*line 3"):
        load_study_config(bad)


def test_the_divergence_variant_takes_a_dotted_path_named_by_its_last_part(tmp_path, monkeypatch):
    """variants.divergence.divergences took the shipped names only, where loss.divergence takes a function's dotted
    path; a path is taken now, its runs named by its last part (a run folder cannot hold the dots); two that would
    name the same runs, and a path that does not import, are refused in one line."""
    (tmp_path / "study_divs.py").write_text("from torchtune_longshort.loss.divergences import js_per_position as js\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    shipped = "torchtune_longshort.loss.divergences.jeffreys_per_position"

    def given(divs):
        def change(raw):
            raw["variants"] = {"divergence": {"method": "pi", "alphas": [0.1], "divergences": divs}}
        return _write(tmp_path, change)

    cfg = load_study_config(given(["js", shipped]), repo_root=ROOT)
    runs = [r for r in cfg.grid if r.variant == "divergence" and r.seed == cfg.seeds[0]]
    assert [(r.key, r.overrides["loss"]["divergence"]) for r in runs] == [
        (f"pi_a0.1_js_s{cfg.seeds[0]}", "js"), (f"pi_a0.1_jeffreys_per_position_s{cfg.seeds[0]}", shipped)]
    with pytest.raises(StudyConfigError) as info:
        load_study_config(given(["js", "study_divs.js"]), repo_root=ROOT)
    assert str(info.value).endswith(
        "variants.divergence.divergences: 'js' and 'study_divs.js' would both name runs '<method>_a<alpha>_js' (a "
        "dotted path's runs are named by its last part): give one, or name the other function otherwise")
    from torchtune_longshort.study.values import divergences  # the field's check, as the two calls above ask it

    with pytest.raises(ValueError, match=r"or dotted paths of functions of your own \(my_divs.my_div\) "
                                         r"\(divergence='nodivs_mod.f': 'nodivs_mod.f' does not import"):
        divergences("variants.divergence.divergences", ["nodivs_mod.f"])
    sys.modules.pop("study_divs", None)


def test_the_babilong_haystack_field_says_what_the_generators_help_says(capsys):
    # eval.babilong.haystack said "stdlib, pg19, or a .txt file or folder (default: the generator's)": no glob, which
    # the generator's --haystack (the study passes the value on) takes, ** any folders
    from torchtune_longshort.eval.tasks.babilong import generator
    from torchtune_longshort.study.eval_config import BabilongConfig

    with pytest.raises(SystemExit):
        generator.main(["--help"])
    said = " ".join(capsys.readouterr().out.split())  # the reference: what the generator's --help says
    entry = said.split("--haystack HAYSTACK ", 1)[1].split(" (default stdlib)", 1)[0].replace(", quoted", "")
    assert "glob" in entry and "**" in entry, entry
    doc = next(f.metadata["doc"] for f in dataclasses.fields(BabilongConfig) if f.name == "haystack")
    assert " ".join(doc.split()).startswith(entry), (doc, entry)
