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


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_refusal_under_torchrun_reaches_its_agent_report(tmp_path, monkeypatch, capsys, rank):
    # Under torchrun every worker refuses: the first to refuse prints the line (whatever its rank: rank 0 printed
    # before, and a rank 0 slower than rank 1 was stopped by the agent before it printed, so no line came out), and
    # each writes it where torch's elastic agent reads a worker's failure; torch's own reader and report format are
    # the reference.
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from torchtune_longshort.refusals import refusal

    attempt = tmp_path / "attempt_0"  # the agent's layout: <attempt>/<local rank>/error.json
    error_file, other = attempt / rank / "error.json", attempt / str(1 - int(rank)) / "error.json"
    error_file.parent.mkdir(parents=True), other.parent.mkdir()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r1")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.setenv("RANK", rank)
    assert refusal("longshort_finetune", "seq_len=0:\n must be positive") == 2
    line = "longshort_finetune: error: seq_len=0: must be positive"
    assert capsys.readouterr().err == line + "\n"
    failure = ProcessFailure(local_rank=int(rank), pid=1, exitcode=2, error_file=str(error_file))
    assert failure.message["message"] == line
    report = ChildFailedError("longshort_finetune", {int(rank): failure}).format_msg()
    assert f"traceback : {line}" in report and "To enable traceback" not in report, report
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(other))  # the other worker refuses second: it does not print
    monkeypatch.setenv("RANK", str(1 - int(rank)))
    assert refusal("longshort_finetune", "seq_len=0: must be positive") == 2
    assert capsys.readouterr().err == "" and ProcessFailure(0, 1, 2, str(other)).message["message"] == line
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")  # a RANK without torchrun (another launcher): every rank prints
    error_file.unlink()
    refusal("longshort_finetune", "seq_len=0: must be positive")
    assert capsys.readouterr().err == line + "\n" and not error_file.exists()


def test_a_worker_stopped_under_torchrun_names_its_stop_in_the_agent_report(tmp_path, monkeypatch, capsys):
    # The agent stops the other workers when one refuses; a worker still setting up ended in one line, exit 143,
    # and torchrun's report said "error_file: <N/A> ... To enable traceback see ..." for it (CI, 2026-12-04)
    import signal

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from torchtune_longshort.refusals import Stopped, stoppable

    error_file = tmp_path / "attempt_0" / "1" / "error.json"
    error_file.parent.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r1")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))

    def setting_up():
        raise Stopped(signal.SIGTERM)

    with pytest.raises(SystemExit) as e:
        stoppable("longshort_finetune", setting_up, "stopped while setting up")
    line = "longshort_finetune: interrupted (SIGTERM): stopped while setting up"
    assert e.value.code == 143 and capsys.readouterr().err == line + "\n"
    failure = ProcessFailure(local_rank=1, pid=1, exitcode=143, error_file=str(error_file))
    report = ChildFailedError("longshort_finetune", {1: failure}).format_msg()
    assert f"traceback : {line}" in report and "To enable traceback" not in report, report
    # a second worker of the attempt stopped too (Ctrl-C reaches every worker): its line goes to its error file only,
    # so the terminal shows one (it showed one a worker)
    other = tmp_path / "attempt_0" / "0" / "error.json"
    other.parent.mkdir()
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(other))
    with pytest.raises(SystemExit):
        stoppable("longshort_finetune", setting_up, "stopped while setting up")
    assert capsys.readouterr().err == "" and line in other.read_text()
    # the agent stopped the workers because one refused (that worker printed its refusal): none prints a stop
    attempt = tmp_path / "attempt_1"
    for rank in ("0", "1"):
        (attempt / rank).mkdir(parents=True)
    (attempt / "refused").touch()
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(attempt / "1" / "error.json"))
    with pytest.raises(SystemExit):
        stoppable("longshort_finetune", setting_up, "stopped while setting up")
    assert capsys.readouterr().err == "" and line in (attempt / "1" / "error.json").read_text()
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")  # outside torchrun: the line only
    error_file.unlink()
    with pytest.raises(SystemExit):
        stoppable("longshort_finetune", setting_up, "stopped while setting up")
    assert capsys.readouterr().err == line + "\n" and not error_file.exists()


@pytest.mark.slow
def test_tune_run_two_processes_prints_a_refusal_once(tmp_path):
    # `tune run --nproc_per_node 2` with a typo: each worker printed the refusal and torchrun's report said
    # "error_file: <N/A> ... To enable traceback see ..." for both; now one line, and the report names it per rank.
    import subprocess
    import sys

    from warm_start import with_warm_start

    env = dict(__import__("os").environ, PYTHONPATH=with_warm_start(str(REPO)), OMP_NUM_THREADS="1",
               TMPDIR=str(tmp_path))
    tune = str(Path(sys.executable).with_name("tune"))
    p = subprocess.run([tune, "run", "--nproc_per_node", "2", "recipes/longshort_finetune.py", "--config",
                        "configs/tiny/longshort_stdlib.yaml", "max_step=3", f"output_dir={tmp_path / 'out'}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and not (tmp_path / "out").exists(), out
    printed = [ln for ln in out.splitlines() if ln.startswith("longshort_finetune: error:")]
    assert len(printed) == 1 and "'max_step' (did you mean 'max_steps'?)" in printed[0], out
    # a worker the agent stopped then prints no "interrupted" line of its own: nobody interrupted the command
    assert not [ln for ln in out.splitlines() if ln.startswith("longshort_finetune: interrupted")], out
    # each worker is named with its line: its refusal, or the stop of one the agent stopped while it set up
    assert 1 <= out.count(f"traceback : {printed[0]}") <= 2 and "To enable traceback" not in out, out


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


def test_a_refusal_recorded_for_torchrun_is_whole_when_a_stop_arrives_while_it_is_written(tmp_path, monkeypatch):
    """torchrun's agent stops the other workers once one fails: a worker stopped between `open` and the write of
    its error file left it empty, and the agent's report printed a JSONDecodeError traceback (seen once in CI, in
    test_tune_run_two_processes_prints_a_refusal_once). A SIGTERM arriving mid-write now waits for the file."""
    import json
    import os
    import signal

    import torchtune_longshort.refusals as refusals

    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop()

    real_dump = json.dump

    def dump_stopped_midway(obj, f):
        f.write("{")
        os.kill(os.getpid(), signal.SIGTERM)  # as the agent stops this worker
        f.write(json.dumps(obj)[1:])

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        monkeypatch.setattr(refusals.json, "dump", dump_stopped_midway)
        path = tmp_path / "error.json"
        with pytest.raises(Stop):  # the stop still comes, after the file
            refusals.record_for_torchrun(str(path), "prog: error: bad key")
    finally:
        signal.signal(signal.SIGTERM, previous)
        monkeypatch.setattr(refusals.json, "dump", real_dump)
    data = json.loads(path.read_text())
    assert data["message"]["message"] == "prog: error: bad key" and list(tmp_path.iterdir()) == [path]


def test_an_empty_world_size_or_rank_reads_as_unset(monkeypatch, capsys):
    """``WORLD_SIZE=`` / ``RANK=`` (set empty, as ``WORLD_SIZE=$UNSET`` does) read as unset by every reader
    (0c98753: torchtune_longshort/launcher.py, the one reader): longshort-validate's --nproc_per_node default ended
    in ``ValueError: invalid literal for int()`` before it read its config. The reference: the variables unset."""
    from torchtune_longshort.launcher import launched_rank, launched_world_size
    from torchtune_longshort.training.recipe_config.validate import main

    def seen():
        with pytest.raises(SystemExit) as refused:  # the config is not there: one line, exit 2
            main(["no_such_config.yaml"])
        return launched_world_size(), launched_rank(), refused.value.code, capsys.readouterr().err

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    unset = seen()
    monkeypatch.setenv("WORLD_SIZE", "")
    monkeypatch.setenv("RANK", "")
    assert seen() == unset
    assert unset[:3] == (1, 0, 2) and "no_such_config.yaml" in unset[3], unset
