"""Advice that tells the user to run another of this project's commands named it by its console script whichever
way the user had started the command that printed it: under `python -m torchtune_longshort.eval run --model hf
--model_args pretrained=BASE,peft=run/step_3/adapter` the way on was "after longshort-eval peft-base ...", a script
a `python -m` user may not have on the PATH. Advice now names the advised command as this process was started
(started_as.advised_command): `python -m <its module>` under `python -m`, its console script otherwise (tune run, a
test's call). References: the command line the test types, and the installed entry points (importlib.metadata)."""

from __future__ import annotations

import json
import sys
import types
from importlib import metadata
from importlib.machinery import ModuleSpec

import pytest

from torchtune_longshort.eval.other_model_args import check_peft_args

EVAL = "torchtune_longshort.eval"


def _started(monkeypatch, typed, spec) -> None:
    """This process as `python -m <typed>` (Python runs <spec> as __main__), or as a console script (typed None)."""
    if typed:
        monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", typed], raising=False)
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=spec and ModuleSpec(spec, None)))


def _script(module: str) -> str:
    (ep,) = [ep for ep in metadata.entry_points(group="console_scripts") if ep.module == module]
    return ep.name


def _rope_changed_step(tmp_path):
    """A base and a LoRA run's step_3 whose config.json changed the RoPE: --model hf needs the peft-base folder."""
    base, step = tmp_path / "base", tmp_path / "run" / "step_3"
    (step / "adapter").mkdir(parents=True)
    base.mkdir()
    config = {"model_type": "llama", "rope_theta": 10000.0, "max_position_embeddings": 64}
    (base / "config.json").write_text(json.dumps(config))
    (step / "config.json").write_text(json.dumps({**config, "rope_theta": 40000.0}))
    (step / "adapter" / "longshort_adapter.json").write_text(json.dumps({"rank": 4, "base_quantization": None}))
    return base, step


RECIPE = "torchtune_longshort.recipes.longshort_finetune"


@pytest.mark.parametrize("typed, spec, torchrun", [
    (EVAL, f"{EVAL}.__main__", False),  # python -m torchtune_longshort.eval run ...
    ("torchtune_longshort.study", "torchtune_longshort.study.__main__", False),
    (None, None, False),  # longshort-eval run ... (its script: no __spec__)
    # tune run --nproc_per_node 2 <recipe>: torchrun's agent starts each worker as `python -u -m <recipe>`, which the
    # user never typed; the workers' adapter line advised `python -m torchtune_longshort.eval peft-base`, one
    # process's `longshort-eval peft-base`
    (RECIPE, RECIPE, True)])
def test_the_peft_base_way_on_names_the_command_as_started(tmp_path, monkeypatch, typed, spec, torchrun):
    base, step = _rope_changed_step(tmp_path)
    _started(monkeypatch, typed, spec)
    if torchrun:
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r1")
    else:
        monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    with pytest.raises(ValueError) as e:
        check_peft_args(str(base), str(step / "adapter"))
    said = f"python -m {EVAL}" if typed and not torchrun else _script(f"{EVAL}.__main__")
    assert f", which {said} peft-base {step} --out " in str(e.value), str(e.value)


@pytest.mark.parametrize("typed, spec", [(EVAL, f"{EVAL}.__main__"), (None, None)])
def test_peft_bases_refusal_of_a_rope_transformers_cannot_run_names_the_command_as_started(tmp_path, monkeypatch,
                                                                                           typed, spec):
    """`python -m torchtune_longshort.eval peft-base run/step_3 --out o` on a CLEX step said "evaluate the merged step
    with longshort-eval run --model longshort ..."."""
    from torchtune_longshort.eval.peft_base import plan_base_folder
    from torchtune_longshort.models.hf_rope import not_representable_rope_type

    step = tmp_path / "run" / "step_3"
    (step / "adapter").mkdir(parents=True)
    (step / "adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "base"}))
    rope_type = not_representable_rope_type("clex")
    (step / "config.json").write_text(json.dumps({"model_type": "llama", "rope_scaling": {"rope_type": rope_type}}))
    _started(monkeypatch, typed, spec)
    with pytest.raises(ValueError) as e:
        plan_base_folder(str(step), str(tmp_path / "o"))
    said = f"python -m {EVAL}" if typed else _script(f"{EVAL}.__main__")
    assert f"evaluate the merged step with {said} run --model longshort --model_args pretrained={step}" in str(e.value)



@pytest.mark.parametrize("typed", ["torchtune_longshort.study", "torchtune_longshort.study.table1", None])
def test_the_config_list_the_study_commands_help_names_is_the_command_as_started(monkeypatch, typed):
    """`python -m torchtune_longshort.study --help` (a command with no console script; Table 1 and the figures alike)
    told its --config's shipped names by "`longshort-cp --list`", a script a `python -m` user may not have on the PATH.
    Their --help builds the name with list_command (a --help run imports torch: 13 s here, walked by hand)."""
    from torchtune_longshort.configs_cli import list_command

    _started(monkeypatch, typed, typed and f"{typed}.__main__")
    (cp,) = [ep for ep in metadata.entry_points(group="console_scripts") if ep.name == "longshort-cp"]
    assert list_command() == (f"python -m {cp.module} --list" if typed else "longshort-cp --list")


@pytest.mark.parametrize("typed", ["torchtune_longshort.training.recipe_config.validate", None])
def test_longshort_validates_help_names_the_config_list_as_started(monkeypatch, capsys, typed):
    """`python -m torchtune_longshort.training.recipe_config.validate --help` said "a shipped config (longshort-cp
    --list)", a script a `python -m` user may not have on the PATH."""
    from torchtune_longshort.training.recipe_config import validate

    _started(monkeypatch, typed, typed)
    with pytest.raises(SystemExit) as e:
        validate.main(["--help"])
    assert e.value.code == 0
    (cp,) = [ep for ep in metadata.entry_points(group="console_scripts") if ep.name == "longshort-cp"]
    said = f"python -m {cp.module} --list" if typed else f"{cp.name} --list"
    assert f"a shipped config ({said})" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("typed", ["torchtune_longshort.models.gguf", None])
def test_the_gguf_conversions_lines_name_longshort_eval_as_started(tmp_path, monkeypatch, capsys, typed):
    """`python -m torchtune_longshort.models.gguf --gguf <a Hugging Face folder>` (a command with no console script)
    said "pass it as checkpoint_dir= (the recipe) or pretrained= (longshort-eval)", and its note on a model of no family
    "the converted folder serves longshort-eval --model hf": a script a `python -m` user may not have on the PATH."""
    from torchtune_longshort.models.gguf import _note_family
    from torchtune_longshort.models.gguf_checks import hf_folder_hint

    (tmp_path / "config.json").write_text("{}")
    _started(monkeypatch, typed, typed)
    said = f"python -m {EVAL}" if typed else _script(f"{EVAL}.__main__")
    assert hf_folder_hint(tmp_path).endswith(f"or pretrained= ({said})")
    _note_family({"model_type": "no_such_family"}, tmp_path / "g.gguf")
    assert f"-- the converted folder serves {said} --model hf, not the recipe" in capsys.readouterr().err


@pytest.mark.parametrize("typed", [EVAL, None])
def test_longshort_evals_reasons_naming_the_longshort_model_name_the_command_as_started(tmp_path, monkeypatch, typed):
    """`python -m torchtune_longshort.eval run --model hf ...` refused a request past the model's positions, or a task
    that needs the longshort model, with "... or longshort-eval --model longshort ..." / "Run it with longshort-eval
    run --model longshort ...": a script a `python -m` user may not have on the PATH."""
    from torchtune_longshort.eval.model.limits import RequestLimits
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError, check_fits_model, needs_longshort

    _started(monkeypatch, typed, typed and f"{typed}.__main__")
    said = f"python -m {EVAL}" if typed else _script(f"{EVAL}.__main__")
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 256}))
    with pytest.raises(TaskDataError) as e:
        check_fits_model(512, {"lm_eval_model": "hf", "pretrained": str(tmp_path)})
    assert str(e.value).endswith(f", or {said} --model longshort with rope=<method>,rope_factor=<f>"), str(e.value)
    told = needs_longshort("longshort_misalignment", {"lm_eval_model": "hf"}, "its divergences")
    assert f"Run it with {said} run --model longshort --model_args pretrained=<checkpoint> ..." in told, told
    limits = RequestLimits(model="hf", max_length=8, usable_length=8)
    assert limits._no_room_reason(8).endswith(f"or {said} --model longshort with rope=<method>,rope_factor=<f>")
