"""longshort-eval's reading of a ``run`` command line against lm-eval's own parser on the same argv: lm-eval's default
``--batch_size`` is taken, a valueless ``--apply_chat_template`` at the end is on, an ambiguous abbreviation is left
for lm-eval to refuse, ``-o=DIR`` is ``DIR``, and of two ``--model_args batch_size=`` the last one goes on as the flag.
The mutants ``int(value) > 1``, ``i + 1 > len(out)``, ``len(abbreviated) >= 1``, ``a[2:]`` for ``-o=`` and
``found[0]`` survived the option tests."""

import pytest

from torchtune_longshort.eval.cli_argv import canonical_options, check_batch_size, flag_given
from torchtune_longshort.eval.cli_run import lm_eval_argv


def _parse(argv):
    from lm_eval._cli.harness import HarnessCLI

    return HarnessCLI()._parser.parse_args(argv)


def test_lm_evals_default_batch_size_is_taken():
    from lm_eval.config.evaluate_config import EvaluatorConfig

    default = EvaluatorConfig.__dataclass_fields__["batch_size"].default  # what lm-eval runs without the flag
    check_batch_size(str(default), f"--batch_size {default}")
    out = lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--batch_size", str(default)])
    assert out[out.index("--batch_size") + 1] == str(default)


def test_a_valueless_flag_at_the_end_is_on_as_lm_eval_reads_it():
    for tail in (["--apply_chat_template"], ["--apply_chat_template", "--limit", "1"], ["--apply_chat_template", "x"]):
        argv = ["run", "--model", "hf", *tail]
        assert flag_given(argv, "--apply_chat_template") is bool(_parse(argv).apply_chat_template), argv
    assert not flag_given(["run", "--model", "hf"], "--apply_chat_template")


def test_an_ambiguous_abbreviation_is_left_for_lm_eval_to_refuse_and_a_unique_one_is_its_option(capsys):
    argv = ["run", "--m", "hf"]
    with pytest.raises(SystemExit) as e:
        _parse(argv)
    assert e.value.code == 2 and "ambiguous option" in capsys.readouterr().err
    assert canonical_options(argv) == argv
    argv = ["run", "--outp", "res"]
    out = canonical_options(argv)
    assert out[1:] == ["--output_path", "res"] and _parse(argv).output_path == "res"


def test_a_short_option_with_an_equals_sign_is_its_value():
    for argv in (["run", "-o=res"], ["run", "-ores"], ["run", "-o", "res"]):
        out = canonical_options(argv)
        assert out[1:] == ["--output_path", _parse(argv).output_path] == ["--output_path", "res"], (argv, out)


def test_the_last_model_args_item_goes_on_as_the_flag_as_lm_eval_merges_them():
    argv = ["run", "--model", "hf", "--tasks", "longshort_ppl", "--model_args", "batch_size=2", "--model_args",
            "batch_size=4"]
    out = lm_eval_argv(argv)
    assert out[out.index("--batch_size") + 1] == str(_parse(argv).model_args["batch_size"]) == "4"


@pytest.mark.parametrize("spelling", [["--model_a", "{}"], ["--model_a={}"], ["-a", "{}"], ["--model_args", "{}"]])
def test_a_device_in_abbreviated_model_args_is_named_as_model_args(spelling, monkeypatch):
    # `--model_a pretrained=...,device=cuda:3` on a machine without it: the refusal said "--device='cuda:3': ... pass
    # --device cpu", a flag the user did not type
    from torchtune_longshort.eval import cli_run

    argv = ["run", "--model", "hf", "--tasks", "longshort_ppl"] + [s.format("dtype=float32,device=cuda:3")
                                                                    for s in spelling]
    assert _parse(argv).model_args["device"] == "cuda:3"  # lm-eval reads it in --model_args
    named = []
    monkeypatch.setattr(cli_run, "require_device", lambda device, given_as, fix=None: named.append((device, given_as)))
    monkeypatch.setattr(cli_run, "_refuse_unrepresentable", lambda out, model: None)
    lm_eval_argv(argv)
    assert named == [("cuda:3", "--model_args device")]


@pytest.mark.parametrize("command", [["validate", "--task", "my_own_task"], ["ls", "tasks"]])
def test_ls_and_validate_read_an_abbreviated_include_path_as_lm_eval_does(command, tmp_path):
    # `validate --tasks my_own_task --include mytasks`: the wrapper saw no --include_path and added the pack's, which
    # lm-eval read in its place ("no task 'my_own_task'"); `ls tasks --include mytasks` did not list the folder's
    from torchtune_longshort.eval.cli_argv import option

    argv = command + ["--include", str(tmp_path)]
    parsed = _parse(argv)
    out = lm_eval_argv(argv)
    assert option(out, "--include_path") == parsed.include_path == str(tmp_path)
    assert option(out, "--tasks") == getattr(parsed, "tasks", None)
