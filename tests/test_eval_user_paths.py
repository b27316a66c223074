"""``longshort-eval``'s ``--model_args pretrained=`` as users write a path: after another key (``dtype=float32,
pretrained=~/...``, where no shell expands the tilde) and relative to a folder the command may not run in. Each
either reaches the model as the folder it names, or is refused in one line before lm-eval starts, never as
transformers' "Repo id must be ..." traceback (transformers' own ``AutoConfig`` is the reference for what loads)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("lm_eval")

from huggingface_hub import constants as hub_constants  # noqa: E402
from transformers import AutoConfig  # noqa: E402

from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv  # noqa: E402


def _model_args(out):
    return [a for a in out if "pretrained=" in a]


def test_a_tilde_after_another_model_arg_is_the_home_folder_for_either_model(tiny_llama2_dir, sp_tokenizer_dir,
                                                                              tmp_path, monkeypatch):
    home = tmp_path / "home é"
    home.mkdir()
    (home / "my run").symlink_to(tiny_llama2_dir)
    (home / "tok").symlink_to(sp_tokenizer_dir)
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(OSError):  # what lm-eval's hf model was given: transformers takes it for a hub name
        AutoConfig.from_pretrained("~/my run")
    for spelling in (["--model_args", "dtype=float32,pretrained=~/my run"],
                     ["--model_args=dtype=float32,pretrained=~/my run"],
                     ["--model_args", "dtype=float32", "pretrained=~/my run"]):
        out = lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", *spelling])
        (given,) = _model_args(out)
        pretrained = given.split("pretrained=", 1)[1]
        assert pretrained == str(home / "my run") and "dtype=float32" in " ".join(out), out
        assert AutoConfig.from_pretrained(pretrained).vocab_size > 0  # transformers loads the folder meant
        check_arguments(out)
    # the longshort model: its checkpoint and tokenizer folders (it said "pretrained='~/my run' is not a directory")
    check_arguments(lm_eval_argv(["run", "--model", "longshort", "--tasks", "longshort_ppl", "--model_args",
                                  "dtype=float32,pretrained=~/my run,tokenizer=~/tok", "--device", "cpu"]))
    # a tilde inside another value is no home folder; a key that is no path is left as given
    out = lm_eval_argv(["run", "--model", "hf", "--model_args", "pretrained=/a/~b,revision=~x"])
    assert _model_args(out) == ["pretrained=/a/~b,revision=~x"]


def test_a_relative_pretrained_that_is_not_here_is_refused_naming_the_folder_it_was_looked_for_in(
        tiny_llama2_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my runs").mkdir()
    (tmp_path / "my runs" / "step_2").symlink_to(tiny_llama2_dir)
    for name in ("outputs/x/step_60", "my runs/step_3", "été/step_2"):  # the README's, one with a space, non-ASCII
        with pytest.raises(OSError, match="Repo id must"):  # what lm-eval's hf model raised after its start-up
            AutoConfig.from_pretrained(name)
        with pytest.raises(FileNotFoundError, match=f"--model_args pretrained={name}: does not exist in "
                           f"'{tmp_path}', the folder this command runs in; --model hf needs a checkpoint folder"):
            check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--model_args",
                                          f"pretrained={name},dtype=float32"]))
    # the same path where it is: evaluated (transformers loads it), online too; a hub name online is asked of the
    # hub (tests/test_hub_name_online.py)
    assert AutoConfig.from_pretrained("my runs/step_2").vocab_size > 0
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--model_args",
                                  "pretrained=my runs/step_2"]))


def _offline_check(tmp_path, cache, monkeypatch):
    """Offline from ``tmp_path`` with ``cache`` as the hub cache: the check longshort-eval runs on ``--model hf``'s
    ``--model_args`` before lm-eval starts."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    return lambda args: check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl",
                                                      "--model_args", args]))


def test_a_hub_name_offline_and_not_cached_is_refused_in_one_line(tiny_llama2_dir, tmp_path, monkeypatch):
    """``pretrained=nothere/step_2`` (a valid hub name, no folder here) with the hub offline ended in transformers'
    80-line traceback after its retries, exit 1; refused now where transformers cannot load it either (the
    reference), and a model in the Hugging Face cache (its layout: refs/main -> snapshots/<commit>/) passes."""
    cache, commit = tmp_path / "hub", "0123456789abcdef0123456789abcdef01234567"
    snapshot = cache / "models--myorg--tiny" / "snapshots" / commit
    snapshot.parent.mkdir(parents=True)
    (cache / "models--myorg--tiny" / "refs").mkdir()
    (cache / "models--myorg--tiny" / "refs" / "main").write_text(commit)
    shutil.copytree(tiny_llama2_dir, snapshot)
    check = _offline_check(tmp_path, cache, monkeypatch)

    assert AutoConfig.from_pretrained("myorg/tiny", cache_dir=cache).vocab_size > 0  # offline, from the cache
    check("pretrained=myorg/tiny")
    for args, at in (("pretrained=nothere/step_2", ""), ("pretrained=myorg/tiny,revision=v9", " at revision v9")):
        name, _, revision = args[len("pretrained="):].partition(",revision=")
        with pytest.raises(OSError):  # transformers cannot load it either
            AutoConfig.from_pretrained(name, cache_dir=cache, revision=revision or None)
        with pytest.raises(FileNotFoundError) as refused:
            check(args)
        assert str(refused.value) == (
            f"--model_args pretrained={name}: neither a folder in {str(tmp_path)!r}, the folder this command runs in, "
            f"nor a model in the Hugging Face cache ({cache}){at}, and the hub is offline (HF_HUB_OFFLINE=1): --model "
            "hf needs a checkpoint folder (give its path) or a cached hub model (run once with offline mode off to "
            "download it)")
    # online: the hub is asked (tests/test_hub_name_online.py)


def test_a_path_with_a_comma_is_told_to_go_as_json_in_one_line(tiny_llama2_dir, tmp_path, capsys):
    """lm-eval splits ``--model_args`` at each comma: ``pretrained=/x/runs 1,2/step_2`` printed a usage block, then
    "expected `key=value`, got '2/step_2'", naming no way to pass the folder; the JSON form lm-eval also reads
    does."""
    folder = tmp_path / "runs 1,2"
    folder.mkdir()
    (folder / "step_2").symlink_to(tiny_llama2_dir)
    with pytest.raises(ValueError, match=r"^argument --model_args: expected `key=value`, got '2/step_2'; .* give the "
                                         r"option as JSON, e.g. --model_args '\{\"pretrained\": "):
        check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--model_args",
                                      f"pretrained={folder / 'step_2'}"]))
    with pytest.raises(ValueError, match=r"^argument --metadata: expected `key=value`, got 'foo'$"):
        check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--metadata", "foo"]))
    assert capsys.readouterr().err == ""  # no usage block
    as_json = json.dumps({"pretrained": str(folder / "step_2")})
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--model_args", as_json]))
    assert AutoConfig.from_pretrained(json.loads(as_json)["pretrained"]).vocab_size > 0


def test_a_trailing_slash_of_a_local_pretrained_folder_names_the_same_results_folder(tiny_llama2_dir, tmp_path,
                                                                                     monkeypatch):
    """lm-eval names its results folder after ``pretrained=`` as written (its own GeneralConfigTracker, the
    reference): ``step_2/`` gave ``run__step_2__`` beside ``step_2``'s ``run__step_2``, one checkpoint in two."""
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker
    from lm_eval.utils import sanitize_model_name

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "step_2").symlink_to(tiny_llama2_dir)
    monkeypatch.chdir(tmp_path)

    def results_folder(model, pretrained):
        (given,) = _model_args(lm_eval_argv(["run", "--model", model, "--tasks", "longshort_ppl", "--model_args",
                                             f"dtype=float32,pretrained={pretrained}"]))
        return sanitize_model_name(GeneralConfigTracker._get_model_name(given.split("=", 1)[1]))

    for model in ("hf", "longshort"):
        names = {results_folder(model, p) for p in ("run/step_2", "run/step_2/", "run/step_2//")}
        assert names == {"run__step_2"}, (model, names)
    # a hub name, or a folder that is not here, is left as written (lm-eval, transformers say what it is)
    assert results_folder("hf", "org/missing/") == "org__missing__"


def test_a_missing_pretrained_folder_names_where_it_was_looked_for(tmp_path, monkeypatch):
    """--model longshort's relative pretrained= not there said 'is not a directory' without the folder it looked in
    (--model hf names it)."""
    monkeypatch.chdir(tmp_path)
    said = {}
    for model in ("hf", "longshort"):
        with pytest.raises(FileNotFoundError) as e:
            check_arguments(lm_eval_argv(["run", "--model", model, "--tasks", "longshort_ppl", "--device", "cpu",
                                          "--model_args", "pretrained=my runs/step_2"]))
        said[model] = str(e.value)
        assert f"does not exist in {str(tmp_path)!r}, the folder this command runs in" in said[model], said
    assert said["longshort"] == (f"pretrained='my runs/step_2' does not exist in {str(tmp_path)!r}, the folder this "
                                 "command runs in: expected a Hugging Face checkpoint folder (config.json + "
                                 "*.safetensors)")


@pytest.mark.parametrize("key", ["pretrained", "checkpoint_dir"])
def test_an_empty_pretrained_is_refused_as_empty_not_as_the_working_folder(key, tmp_path, monkeypatch):
    """`--model_args checkpoint_dir=$CKPT` with CKPT unset was told "pretrained='.' has no config.json"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as e:
        check_arguments(lm_eval_argv(["run", "--model", "longshort", "--tasks", "longshort_ppl", "--device", "cpu",
                                      "--model_args", f"{key}="]))
    assert str(e.value) == ("longshort model: pretrained (or checkpoint_dir)='' is empty: give pretrained=<folder "
                            "with config.json + weights> (an unset shell variable gives an empty one)")


def test_a_missing_config_under_the_home_folder_is_named_there(tmp_path, monkeypatch):
    """longshort-validate '~/x.yaml' said 'relative to <cwd>' of a path in the home folder."""
    from torchtune_longshort.configs_cli import resolve_config

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(ValueError) as e:
        resolve_config("~/nonexist.yaml", tmp_path, "config")
    assert str(e.value).startswith(f"config='~/nonexist.yaml' is neither a file (looked for at "
                                   f"{home / 'nonexist.yaml'}) nor a config this package ships"), e.value
    with pytest.raises(ValueError, match=r"is neither a file \(relative to .*\) nor"):
        resolve_config("nonexist.yaml", tmp_path, "config")


def test_a_tilde_in_the_json_spelling_is_the_home_folder_too(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, monkeypatch):
    """The JSON spelling the comma refusal above asks for (``{"pretrained": "~/runs 1,2/step_2"}``) kept its ``~``:
    --model longshort refused "pretrained='~/...' does not exist" of a folder that is there, --model hf went to the
    hub with it; each path key's leading ``~`` is the home folder there too, the other keys as given."""
    home = tmp_path / "home"
    (home / "runs 1,2").mkdir(parents=True)
    (home / "runs 1,2" / "step_2").symlink_to(tiny_llama2_dir)
    (home / "tok").symlink_to(sp_tokenizer_dir)
    monkeypatch.setenv("HOME", str(home))
    for model, other in (("hf", "revision"), ("longshort", "rope")):  # a key that is no path, with a leading ~
        given = {"pretrained": "~/runs 1,2/step_2", "dtype": "float32", other: "~x"}
        out = lm_eval_argv(["run", "--model", model, "--tasks", "longshort_ppl", "--device", "cpu", "--model_args",
                            json.dumps(given)])
        args = json.loads(out[out.index("--model_args") + 1])
        assert args == {**given, "pretrained": str(home / "runs 1,2" / "step_2")}, out
        assert AutoConfig.from_pretrained(args["pretrained"]).vocab_size > 0  # transformers loads the folder meant
        if model == "hf":
            check_arguments(out)
    check_arguments(lm_eval_argv(["run", "--model", "longshort", "--tasks", "longshort_ppl", "--device", "cpu",
                                  "--model_args", json.dumps({"pretrained": "~/runs 1,2/step_2", "tokenizer": "~/tok"})]))


def test_offline_the_cache_is_read_as_transformers_reads_it(tiny_llama2_dir, tmp_path, monkeypatch):
    """Hub offline: a model whose config.json lies under subfolder= passes with it and is refused without it; a
    cache that records config.json as known missing (huggingface_hub's .no_exist marker) is refused; a local folder
    whose relative path is also a valid hub name (run/step_2) passes. transformers' AutoConfig is the reference."""
    cache, commit = tmp_path / "hub", "0123456789abcdef0123456789abcdef01234567"
    for repo, files_under in (("models--myorg--sub", "sub"), ("models--myorg--gone", None)):
        (cache / repo / "refs").mkdir(parents=True)
        (cache / repo / "refs" / "main").write_text(commit)
        snapshot = cache / repo / "snapshots" / commit
        if files_under:
            shutil.copytree(tiny_llama2_dir, snapshot / files_under)
        else:  # asked once online, config.json was not there: the cache remembers that
            snapshot.mkdir(parents=True)
            (cache / repo / ".no_exist" / commit).mkdir(parents=True)
            (cache / repo / ".no_exist" / commit / "config.json").touch()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "step_2").symlink_to(tiny_llama2_dir)
    check = _offline_check(tmp_path, cache, monkeypatch)

    assert AutoConfig.from_pretrained("myorg/sub", subfolder="sub", cache_dir=cache).vocab_size > 0
    check("pretrained=myorg/sub,subfolder=sub")
    assert AutoConfig.from_pretrained("run/step_2").vocab_size > 0
    check("pretrained=run/step_2")
    for name, args in (("myorg/sub", "pretrained=myorg/sub"), ("myorg/gone", "pretrained=myorg/gone")):
        with pytest.raises((OSError, ValueError)):  # transformers cannot load it either (gone: 'Unrecognized model')
            AutoConfig.from_pretrained(name, cache_dir=cache)
        with pytest.raises(FileNotFoundError, match=rf"^--model_args pretrained={name}: neither a folder in .* nor a "
                                                    r"model in the Hugging Face cache"):
            check(args)
