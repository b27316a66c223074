"""Bad input to the recipe fails with a clear message before any training step, and never writes over an
existing output directory. In-process (the recipe class), so the set stays fast."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from recipe_config import make_cfg

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


def setup_fails(recipe_cls, cfg, exc, match):
    with pytest.raises(exc, match=match):
        r = recipe_cls(cfg)
        r.setup()
    out = Path(cfg.output_dir)
    assert not list(out.glob("step_*")) or cfg.checkpointer.checkpoint_dir is None
    assert not (out / "metrics.jsonl").exists()


def test_missing_checkpoint_dir(recipe_cls, tmp_path, sp_tokenizer_dir):
    cfg = make_cfg(tmp_path / "nope", sp_tokenizer_dir, tmp_path / "out")
    # the key the user set leads (the config's checkpointer.checkpoint_dir is ${checkpoint_dir})
    setup_fails(recipe_cls, cfg, FileNotFoundError, r"^checkpoint_dir=.*nope.* does not exist \(checkpointer."
                r"checkpoint_dir is '\$\{checkpoint_dir\}' in the config and was checked first\)")
    assert not (tmp_path / "out").exists()


def test_tokenizer_model_vocab_mismatch(recipe_cls, tmp_path, sp_tokenizer_dir):
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    ckpt = write_random_llama2_checkpoint(tmp_path / "v300", vocab_size=300, embed_dim=64, num_layers=1,
                                          num_heads=4, num_kv_heads=2, intermediate_dim=172, max_seq_len=256)
    cfg = make_cfg(ckpt, sp_tokenizer_dir, tmp_path / "out")
    setup_fails(recipe_cls, cfg, ValueError, r"tokenizer vocabulary \(512 ids.*300 rows.*do not match")


def test_a_setup_refused_after_it_made_output_dir_leaves_none_of_its_parents(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                              sp_tokenizer_dir):
    """Weights that cannot be read are found once the output folder is claimed: the folder went, the parents the
    claim made with it (``output_dir=new/deep/out``) stayed, empty."""
    import shutil

    ckpt = Path(shutil.copytree(tiny_llama2_dir, tmp_path / "ckpt"))
    weights = next(ckpt.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:1000])
    cfg = make_cfg(ckpt, sp_tokenizer_dir, tmp_path / "new" / "deep" / "out")
    setup_fails(recipe_cls, cfg, ValueError, r"cannot read weight file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_dataset_without_text_field(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"content": "x = 1\n" * 50}) + "\n" for _ in range(3)))
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out")
    cfg.dataset = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(data)}
    setup_fails(recipe_cls, cfg, ValueError, r"no text field 'text'.*\['content'\].*dataset.text_field")


def test_seq_len_above_rope_range(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", seq_len=512)
    setup_fails(recipe_cls, cfg, ValueError, r"seq_len=512 is above the range of the model's RoPE.*max_seq_len=256")


def test_batch_not_divisible_by_world_size(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")  # checked before any process group is created
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", batch_size=4)
    setup_fails(recipe_cls, cfg, ValueError, r"batch_size=4 is not divisible by world_size \(3\)")
    assert not (tmp_path / "out").exists()


def test_validate_checks_a_config_for_the_processes_it_is_named(tmp_path, monkeypatch, capsys):
    # `longshort-validate ... batch_size=3` said OK to a config `tune run --nproc_per_node 2` refuses: the processes
    # came from $WORLD_SIZE alone, which the README did not name
    from torchtune_longshort.training.recipe_config.validate import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["tiny/longshort_stdlib.yaml", "batch_size=3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("longshort-validate: tiny/longshort_stdlib.yaml: OK (")
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny/longshort_stdlib.yaml", "batch_size=3", "--nproc_per_node", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "batch_size=3 is not divisible by world_size (2)" in err
    assert main(["tiny/longshort_stdlib.yaml", "--nproc_per_node", "2"]) == 0
    assert "OK for 2 processes (" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:  # key=value after the option, as tune run takes it: read, not refused
        main(["tiny/longshort_stdlib.yaml", "--nproc_per_node", "2", "batch_size=3"])  # as "unrecognized arguments"
    assert exit_info.value.code == 2 and "batch_size=3 is not divisible by world_size (2)" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_device_index_under_torchrun_is_refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
                                                  monkeypatch):
    """Under torchrun each process takes cuda:<LOCAL_RANK> (torchtune's get_device); device=cuda:1 made every rank
    call torch.cuda.set_device(cuda:1) and then fail in torchtune with a traceback ("You can't specify a device
    index when using distributed training"). Refused in one line, before any CUDA call or folder."""
    import torch

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a 2-GPU machine, as far as the checks ask
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: pytest.fail(f"set_device({d}) before the refusal"))
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", device="cuda:1", batch_size=2)
    setup_fails(recipe_cls, cfg, ValueError, r"device='?cuda:1'? with 2 processes.*device=cuda")
    assert not (tmp_path / "out").exists()


def test_existing_output_dir_not_overwritten(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out)
    # neither resume=True nor an overwrite takes a folder the recipe did not make: the message advised both
    setup_fails(recipe_cls, cfg, FileExistsError, r"exists and is not empty; refusing to write over it. This recipe "
                                                  "did not make it: choose another output_dir$")
    assert (out / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]


def test_resume_without_checkpoint(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", resume=True)
    # a folder that is not there: it said "this recipe did not make that folder"
    setup_fails(recipe_cls, cfg, FileNotFoundError, r"no complete step_<k> checkpoint .*\(it does not exist: start "
                                                    r"the run without resume=True\)")


def test_from_scratch_needs_dimensions(recipe_cls, tmp_path, sp_tokenizer_dir):
    model = {"_component_": "torchtune_longshort.models.hf_decoder", "family": "llama", "vocab_size": 512,
             "num_layers": 2, "num_heads": 4, "max_seq_len": 256}
    cfg = make_cfg(None, sp_tokenizer_dir, tmp_path / "out", model=model)
    setup_fails(recipe_cls, cfg, ValueError, r"explicit dimensions; missing \['embed_dim'\]")
    cfg.model = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": None}
    setup_fails(recipe_cls, cfg, ValueError, r"model: give checkpoint_dir \(a checkpoint folder\) or family")


@pytest.mark.parametrize("what", ["missing", "folder", "not_yaml", "a_list", "open_interpolation", "twice"])
def test_tune_run_config_file_refused_in_one_line(tmp_path, monkeypatch, capsys, what):
    # `tune run <recipe> --config FILE` with FILE missing, a folder, broken YAML or a YAML list: torchtune's parser
    # opened it and ended with a traceback (exit 1); now one line naming the file, exit 2, nothing written.
    from torchtune_longshort.recipes.longshort_finetune import recipe_main

    path = tmp_path / "run.yaml"
    if what == "folder":
        path.mkdir()
    elif what == "not_yaml":
        path.write_text("a: [1,\nb: 2\n")
    elif what == "a_list":
        path.write_text("- 1\n- 2\n")
    elif what == "open_interpolation":  # OmegaConf's GrammarParseError traceback
        path.write_text((REPO / "configs" / "tiny" / "longshort_stdlib.yaml").read_text() + "my_dir: ${oops\n")
    elif what == "twice":  # a key written twice: OmegaConf's ConstructorError traceback (PyYAML keeps the last)
        path.write_text((REPO / "configs" / "tiny" / "longshort_stdlib.yaml").read_text() + "metric_logger: null\n")
    before = sorted(tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["longshort_finetune.py", "--config", str(path), f"output_dir={tmp_path / 'out'}"])
    with pytest.raises(SystemExit) as exit_info:
        recipe_main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("longshort_finetune: error:") and str(path) in err
    assert {"open_interpolation": "my_dir: its value is not a valid ${...} interpolation",
            "twice": "found duplicate key metric_logger"}.get(what, "") in err
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("override,needle", [("foo", "override 'foo': expected key=value"),
                                             ("dataset.path=a=b.txt", "a value holding '=' cannot be given on the "
                                                                      "command line"),
                                             # checkpointer.output_dir is ${output_dir}: OmegaConf's own text, no fix
                                             ("~output_dir", "checkpointer.output_dir: Interpolation key 'output_dir' "
                                                             "not found: its value refers to that key"),
                                             ("e_range=[1,", "override 'e_range=[1,': its value is not YAML"),
                                             ("~nothere", "Could not find key nothere"),
                                             # a `${` never closed, an environment variable not set: OmegaConf's
                                             # traceback (exit 1); the second said "refers to that key"
                                             ("output_dir=${oops", "override: output_dir: its value is not a valid "
                                                                   "${...} interpolation"),
                                             ("output_dir=${oc.env:LONGSHORT_NOT_SET}", "output_dir: \"Environment "
                                              "variable 'LONGSHORT_NOT_SET' not found\": set it"),
                                             # a list over a mapping, a mapping over a list: OmegaConf's "Cannot
                                             # merge incompatible container types" traceback (exit 1)
                                             ("validation=[1,2]", "override 'validation=[1,2]': validation is a "
                                              "mapping in the config, and a list cannot replace it from the command "
                                              "line; set its keys one at a time (validation.<key>=...)"),
                                             ("e_range={a: 1}", "override 'e_range={a: 1}': e_range is a list in the "
                                              "config, and a mapping cannot replace it from the command line; give a "
                                              "list (e_range=[a,b])"),
                                             # a mapping inside a section, named by its dotted key
                                             ("validation.dataset=[1,2]", "override 'validation.dataset=[1,2]': "
                                              "validation.dataset is a mapping in the config, and a list cannot "
                                              "replace it from the command line; set its keys one at a time "
                                              "(validation.dataset.<key>=...)")])
def test_a_malformed_override_is_refused_in_one_line(tmp_path, monkeypatch, capsys, override, needle):
    # `tune run ... foo` (no '=') or a value that is not YAML ended in torchtune's parser with a 26-45 line traceback
    from torchtune_longshort.recipes.longshort_finetune import recipe_main
    from torchtune_longshort.training.recipe_config.validate import main

    cfg = REPO / "configs" / "tiny" / "longshort_stdlib.yaml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["longshort_finetune.py", "--config", str(cfg), override])
    for prog, run in (("longshort_finetune", recipe_main), ("longshort-validate", lambda: main([str(cfg), override]))):
        with pytest.raises(SystemExit) as exit_info:
            run()
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith(f"{prog}: error:"), err
        assert needle in err, err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_setting_up_ends_in_one_line_and_takes_back_what_it_made(tmp_path, monkeypatch, capsys, signum):
    # Ctrl-C there ended in a KeyboardInterrupt traceback, exit 1; SIGTERM with no line at all, exit 143 (during the
    # tokenizer's training, its temporary folder stayed)
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe, recipe_main
    from torchtune_longshort.refusals import Stopped

    def stop(self, recipe_state):
        assert (tmp_path / "out" / ".lock").is_file()  # the folder is claimed: the stop must take it back
        raise Stopped(signum)

    monkeypatch.setattr(LongShortFinetuneRecipe, "_setup_model", stop)
    monkeypatch.chdir(tmp_path)
    cfg = REPO / "configs" / "tiny" / "longshort_stdlib.yaml"
    monkeypatch.setattr("sys.argv", ["longshort_finetune.py", "--config", str(cfg), f"output_dir={tmp_path / 'out'}",
                                     f"tokenizer.path={tmp_path / 'tok'}", "tokenizer.train_files_limit=20"])
    with pytest.raises(SystemExit) as exit_info:
        recipe_main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 128 + signum and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"longshort_finetune: interrupted ({signal.Signals(signum).name}): stopped while "
                              "setting up, before the first step: nothing was trained"), err
    assert not any(tmp_path.iterdir())  # neither its output folder nor the tokenizer it trained


def test_a_shipped_configs_name_runs_as_longshort_validate_takes_it(tmp_path, monkeypatch):
    # `tune run <recipe> --config tiny/longshort_stdlib.yaml` (torchtune's habit with its own config names) was
    # refused as no such file, while longshort-validate took the name
    from torchtune_longshort.configs_cli import config_path
    from torchtune_longshort.training.recipe_config.validate import check_config_argument

    monkeypatch.chdir(tmp_path)
    shipped = str(config_path("tiny/longshort_stdlib.yaml"))
    for given, want in ((["--config", "tiny/longshort_stdlib.yaml", "max_steps=2"],
                         ["--config", shipped, "max_steps=2"]),
                        (["--config=tiny/longshort_stdlib.yaml"], [f"--config={shipped}"])):
        assert check_config_argument(given) == want
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "longshort_stdlib.yaml").write_text("max_steps: 3\n")  # a file of that name wins
    named = ["--config", "tiny/longshort_stdlib.yaml"]
    assert check_config_argument(named) == named


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_recipes_usage_as_torchtunes_recipes_do(tmp_path, monkeypatch, capsys, flag):
    # `tune run <recipe> --config FILE --help` was refused as an override that is not key=value, exit 2
    from torchtune_longshort.recipes.longshort_finetune import recipe_main

    monkeypatch.chdir(tmp_path)
    cfg = REPO / "configs" / "tiny" / "longshort_stdlib.yaml"
    monkeypatch.setattr("sys.argv", ["longshort_finetune.py", "--config", str(cfg), flag])
    with pytest.raises(SystemExit) as exit_info:
        recipe_main()
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and out.startswith("usage:") and "--config CONFIG" in out, out
    assert "longshort-validate FILE" in out and not any(tmp_path.iterdir())


def test_longshort_validate_refuses_broken_yaml_in_one_line(tmp_path, capsys):
    # `longshort-validate bad.yaml` (a YAML syntax error) ended in a yaml.ScannerError traceback, exit 1.
    from torchtune_longshort.training.recipe_config.validate import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\nb: 2\n")
    with pytest.raises(SystemExit) as exit_info:
        main([str(bad)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "is not valid YAML" in err and str(bad) in err, err


def test_longshort_validate_without_a_config_names_only_the_config_as_required(capsys):
    # `longshort-validate` alone said "the following arguments are required: config, key=value": the overrides
    # are optional (argparse marks a '*' positional without a default required in its message).
    from torchtune_longshort.training.recipe_config.validate import main

    with pytest.raises(SystemExit) as exit_info:
        main([])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err == "longshort-validate: error: the following arguments are required: config\n", err


def test_an_optional_component_is_turned_off_with_null(tmp_path, monkeypatch, capsys):
    # `lr_scheduler=null` (documented optional) was refused as "lr_scheduler._component_ is missing" (torchtune sets
    # the node's _component_ to null), and `~lr_scheduler` said the key "could not be found" in the config
    from torchtune_longshort.training.recipe_config.validate import main, validate

    cfg = REPO / "configs" / "tiny" / "longshort_stdlib.yaml"
    monkeypatch.chdir(tmp_path)
    base = [f"output_dir={tmp_path / 'out'}", f"tokenizer.path={tmp_path / 'tok'}"]
    assert validate(str(cfg), base + ["lr_scheduler=null"]).lr_scheduler is None
    assert validate(str(cfg), base).lr_scheduler.component.endswith("get_cosine_schedule_with_warmup")
    for override, needle in [("~lr_scheduler", "override ~lr_scheduler: torchtune cannot remove a component node from "
                                               "the command line; turn it off with lr_scheduler=null"),
                             ("optimizer=null", "optimizer._component_ is missing")]:  # a required one stays required
        with pytest.raises(SystemExit) as exit_info:
            main([str(cfg), *base, override])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert not any(tmp_path.iterdir())
