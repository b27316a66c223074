"""``pretrained=`` for the ``longshort`` model, as lm-eval users type it (``checkpoint_dir=`` still works), and
results folders named after the checkpoint exactly as lm-eval's own ``hf`` model names them, and the same provenance
recorded for an ``hf`` run through ``longshort-eval`` as for a ``longshort`` one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv, run_cli  # noqa: E402

from torchtune_longshort.eval.tasks import tasks_path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
META = '{"ppl_source": "stdlib", "ppl_num_samples": 2, "max_seq_lengths": [128]}'


def _run(model, model_args, out):
    return run_cli(["run", "--model", model, "--model_args", model_args, "--device", "cpu", "--batch_size", "2",
                    "--tasks", "longshort_ppl", "--metadata", META,
                    "--output_path", str(out)])


def _results_folder(out: Path) -> str:
    files = list(out.rglob("results_*.json"))
    assert len(files) == 1, files
    return files[0].parent.relative_to(out).as_posix()


def test_results_folder_named_after_the_checkpoint_as_hf_names_it(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    tok = f"tokenizer={sp_tokenizer_dir}"
    hf = _run("hf", f"pretrained={tiny_llama2_dir},{tok},dtype=float32", tmp_path / "hf")
    by_pretrained = _run("longshort", f"pretrained={tiny_llama2_dir},{tok}", tmp_path / "p")
    by_checkpoint_dir = _run("longshort", f"checkpoint_dir={tiny_llama2_dir},{tok}", tmp_path / "c")
    name = _results_folder(tmp_path / "hf")
    assert "tiny_llama2" in name  # hf names the folder after the path (sanitized), not randomly
    assert _results_folder(tmp_path / "p") == name
    assert _results_folder(tmp_path / "c") == name
    ppl = [r["results"]["longshort_ppl"]["ppl_128,none"] for r in (hf, by_pretrained, by_checkpoint_dir)]
    assert ppl[1] == ppl[2] and ppl[1] == pytest.approx(ppl[0], rel=1e-4)
    assert by_pretrained["config"]["checkpoint_dir"] == str(tiny_llama2_dir)
    # lm-eval's tokenizer record (add_tokenizer_info), as hf writes it; the pad token is each model's own (hf takes
    # the tokenizer's unk when it has no pad, longshort pads with EOS: right padding, never scored)
    for key in ("tokenizer_eos_token", "tokenizer_bos_token", "eot_token_id", "max_length"):
        assert by_pretrained[key] == hf[key], (key, by_pretrained.get(key), hf[key])
    assert by_pretrained["tokenizer_pad_token"] == by_pretrained["tokenizer_eos_token"]
    # longshort-eval records for hf what a longshort run records (it was "not recorded" in the report): the project's
    # provenance block, the checkpoint folder and its content fingerprint, the same for one folder
    from torchtune_longshort.eval.report import build_report
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    for key in ("checkpoint_dir", "checkpoint_fingerprint", "provenance"):
        assert hf["config"][key] == by_pretrained["config"][key], key
    assert hf["config"]["checkpoint_fingerprint"] == CheckpointFolder.open(tiny_llama2_dir).fingerprint()
    prov = hf["config"]["provenance"]
    assert prov["packages"]["transformers"] and prov["device"]["type"] == "cpu"
    # stock lm-eval's results of the same run: none of these keys
    stock = tmp_path / "stock" / name
    stock.mkdir(parents=True)
    for f in (tmp_path / "hf").rglob("results_*.json"):
        data = json.loads(f.read_text())
        for key in ("checkpoint_dir", "checkpoint_fingerprint", "provenance"):
            del data["config"][key]
        (stock / f.name).write_text(json.dumps(data))
    from torchtune_longshort.eval.report.build import NOT_RECORDED

    build_report([tmp_path / "hf", tmp_path / "p", tmp_path / "stock"], tmp_path / "rep",
                 labels=["hf", "ours", "stock"])
    md = (tmp_path / "rep" / "report.md").read_text()
    section = md.split("## Provenance", 1)[1]
    assert "Run `hf`:\n\n- torchtune-longshort " in section and "Run `ours`:\n\n- torchtune-longshort " in section
    assert f"Run `stock`:\n\n{NOT_RECORDED}\n" in section and "stock lm-eval" in NOT_RECORDED
    assert ("Runs `hf`, `ours`, `stock` evaluate the same checkpoint folder; `stock` recorded no content fingerprint"
            in md)
    build_report([tmp_path / "hf", tmp_path / "p"], tmp_path / "rep2", labels=["hf", "ours"])
    assert (f"Runs `hf`, `ours` evaluate the same checkpoint: one folder, one content (fingerprint "
            f"{hf['config']['checkpoint_fingerprint']})." in (tmp_path / "rep2" / "report.md").read_text())


def test_argv_rewrite_only_for_longshort_and_only_checkpoint_dir():
    a = ["run", "--model", "longshort", "--model_args", "checkpoint_dir=/c,tokenizer=/t", "--tasks", "x"]
    assert lm_eval_argv(a)[4] == "pretrained=/c,tokenizer=/t"
    b = ["run", "--model", "longshort", "--model_args", "tokenizer=/t", "checkpoint_dir=/c", "--tasks", "x"]
    assert lm_eval_argv(b)[4:6] == ["tokenizer=/t", "pretrained=/c"]
    c = ["run", "--model=longshort", "--model_args=tokenizer=/t,checkpoint_dir=/c"]
    assert lm_eval_argv(c)[2] == "--model_args=tokenizer=/t,pretrained=/c"
    for same in (["run", "--model", "hf", "--model_args", "checkpoint_dir=/c"],
                 ["run", "--model", "longshort", "--model_args", "pretrained=/p,checkpoint_dir=/p"]):
        # unchanged but for the pack's folder, a device that exists and the --metadata naming the model (for tasks
        # that need longshort)
        added = lm_eval_argv(same)[len(same):]
        assert lm_eval_argv(same)[: len(same)] == same and added == [
            "--include_path", str(tasks_path()), "--device", added[3], "--metadata", json.dumps({"lm_eval_model": same[2]})]


def test_lm_evals_short_and_abbreviated_option_names_reach_the_wrappers_rules(tmp_path):
    """``-M longshort`` (lm-eval's short name) was evaluated by the longshort model while the wrapper recorded
    ``hf`` as the run's model, so longshort_misalignment scored NaN ("this run uses --model hf"); ``-o <a file>``
    was not refused before the evaluation. Every spelling lm-eval's parser accepts is read as its long name."""
    short = lm_eval_argv(["run", "-M", "longshort", "-a", "checkpoint_dir=/c", "-t", "x", "-b", "2"])
    assert short[:8] == ["run", "--model", "longshort", "--model_args", "pretrained=/c", "--tasks", "x",
                         "--batch_size"]
    assert json.loads(short[short.index("--metadata") + 1]) == {"lm_eval_model": "longshort"}
    attached = lm_eval_argv(["run", "-Mlongshort", "--model_arg", "checkpoint_dir=/c"])
    assert attached[1:5] == ["--model", "longshort", "--model_args", "pretrained=/c"]
    (tmp_path / "afile").write_text("")
    for spelling in (["-o", str(tmp_path / "afile")], ["--output", str(tmp_path / "afile")]):
        with pytest.raises(NotADirectoryError, match="--output_path"):
            lm_eval_argv(["run", "--model", "hf", *spelling])


def test_a_model_args_device_alone_goes_as_the_device_option():
    """lm-eval 0.4.13 passes its own --device (default cuda:0) beside model_args: ``device=`` in model_args alone
    reached the model twice (TypeError, with hf too); it is passed as ``--device`` instead."""
    for model in ("longshort", "hf"):
        for args in (["--model_args", "pretrained=/p,device=cpu,dtype=float32"],
                     ["--model_args=device=cpu,pretrained=/p"]):
            out = lm_eval_argv(["run", "--model", model, *args])
            assert out[out.index("--device") + 1] == "cpu" and out.count("--device") == 1
            spans = [a for a in out if "pretrained=/p" in a]
            assert len(spans) == 1 and "device=" not in spans[0], out


def test_a_model_args_batch_size_goes_as_the_option_and_bad_paths_are_refused(tmp_path):
    """The same for ``batch_size`` and ``max_batch_size`` (lm-eval passes its own beside model_args: TypeError,
    "got multiple values for keyword argument 'batch_size'"); given both ways, refused. An ``--output_path`` that
    is a file or cannot be created, and a missing ``--include_path``: lm-eval evaluated, then only warned that it
    could not save (exit 0), or found no task; a --metadata that is not JSON was lm-eval's 'Invalid JSON', naming no
    option; refused before anything runs."""
    out = lm_eval_argv(["run", "--model", "longshort", "--model_args", "pretrained=/p,batch_size=4,max_batch_size=8"])
    assert out[out.index("--batch_size") + 1] == "4" and out[out.index("--max_batch_size") + 1] == "8"
    assert [a for a in out if "pretrained=/p" in a] == ["pretrained=/p"]
    (tmp_path / "afile").write_text("")
    for args, error, match in [
            (["--model_args", "pretrained=/p,batch_size=4", "--batch_size", "2"], ValueError, "give it once"),
            (["--output_path", str(tmp_path / "afile")], NotADirectoryError, "is a file, not a folder"),
            (["--output_path", "/proc/longshort_x/r.json"], PermissionError, "cannot be created"),
            (["--output_path", "/proc"], PermissionError, "does not take new files"),  # evaluated, then not saved
            (["--include_path", str(tmp_path / "absent")], FileNotFoundError, "--include_path .* does not exist"),
            (["--metadata", "{'max_seq_lengths': '1k'}"], ValueError, r"--metadata .* is not JSON \(Expecting")]:
        with pytest.raises(error, match=match):
            lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", *args])
    out = lm_eval_argv(["run", "--model", "hf", "--output_path", str(tmp_path / "new" / "r.json")])  # lm-eval's file form
    assert not (tmp_path / "new").exists()
    # checked on disk before lm-eval starts (check_arguments): a pretrained path that is no folder (transformers took
    # it for a hub name: a 69-line traceback), a --metadata key no task of the pack reads (passed on, unread: the
    # tasks ran at their default lengths)
    for args, error, match in [
            (["--model_args", f"pretrained={tmp_path / 'absent'}"], FileNotFoundError, "absent: does not exist; "
             "--model hf needs a checkpoint folder"),
            (["--model_args", f"pretrained={tmp_path / 'afile'}"], FileNotFoundError, "afile: is a file"),
            (["--metadata", '{"max_seq_length": "1k"}'], ValueError, r"key\(s\) \['max_seq_length'\]: no task of the "
             r"pack reads them \(did you mean 'max_seq_lengths'\?\)"),
            (["--metadata", "ppl_source=stdlib", "max_seq_length=1k"], ValueError, "'max_seq_length'"),
            # values a task scored NaN for, the run exiting 0
            (["--metadata", '{"ppl_source": "stdlb"}'], ValueError, "ppl_source='stdlb' is not a source; accepted: "),
            (["--metadata", '{"mis_num_samples": -1}'], ValueError, "mis_num_samples=-1: expected an integer >= 1"),
            (["--metadata", '{"ppl_join_documents": "yes"}'], ValueError, "ppl_join_documents='yes': expected true"),
            # each family's own values (TaskFamily.value_kinds): a passkey depth past 100 (the task's TaskDataError,
            # scored NaN), depths as a string (iterated by character), a BABILong / LongBench-E folder that is not
            # there (every length reported missing_data), a haystack that is not a source
            (["--metadata", '{"passkey_depths": [0, 150]}'], ValueError, r"passkey_depths=\[0, 150\]: expected a list "
             r"of percentages in \[0, 100\]"),
            (["--metadata", '{"passkey_depths": "0,50"}'], ValueError, "passkey_depths='0,50': expected a list"),
            (["--metadata", json.dumps({"babilong_data_dir": str(tmp_path / "absent")})], ValueError,
             "babilong_data_dir=.*absent': expected a folder that exists"),
            (["--metadata", '{"longbench_e_missing": "ignore"}'], ValueError, "expected skip or error"),
            (["--metadata", '{"babilong_prompt": "babilon"}'], ValueError, "babilong_prompt='babilon': expected "
             "lm_eval or babilong"),
            (["--metadata", json.dumps({"passkey_data_files": [str(tmp_path / "nope.jsonl")]})], ValueError,
             "passkey_data_files=.*nope.jsonl'\\]: expected a file, or a list of files, that exist"),
            # a text family's files that name nothing: scored NaN, exit 0, a results file written
            (["--metadata", json.dumps({"ppl_data_files": str(tmp_path / "none" / "*.jsonl")})], ValueError,
             r"ppl_data_files='.*none/\*.jsonl' does not exist \(no such file, folder or glob match\): name files"),
            (["--metadata", json.dumps({"mis_data_files": [str(tmp_path / "nope.txt")]})], ValueError,
             "mis_data_files='.*nope.txt' does not exist"),
            (["--metadata", '{"passkey_haystack": "stdlb"}'], ValueError, "passkey_haystack='stdlb': expected one of "
             "filler, stdlib"),
            # a length the task cannot score: "0" ran, wrote ppl_0k: NaN and exited 0 (-64 was refused)
            (["--metadata", '{"max_seq_lengths": "0"}'], ValueError, r"max_seq_lengths='0': longshort_ppl scores "
             r"lengths of at least 2 tokens \(0 given\)"),
            (["--metadata", '{"max_seq_lengths": "2k", "ppl_max_seq_lengths": [1, 1024]}'], ValueError,
             r"ppl_max_seq_lengths=\[1, 1024\]: .*\(1 given\)")]:
        with pytest.raises(error, match=match):
            check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", *args]))
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl,hellaswag", "--metadata",
                                  '{"max_seq_length": "1k"}']))  # a built-in task may read any key
    # BABILong's 0k is its empty haystack; the task's own key wins over the shared one
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_babilong,longshort_ppl", "--metadata",
                                  '{"max_seq_lengths": "0k,1k", "ppl_max_seq_lengths": "1k"}']))
    # unset values, as the study writes them for a family it does not evaluate: the task's defaults
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--metadata",
                                  '{"mis_max_seq_lengths": [], "mis_num_samples": null, "ppl_source": "stdlib"}']))
    check_arguments(lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl", "--metadata", json.dumps(
        {"passkey_depths": [0, 50.5, 100], "babilong_data_dir": str(tmp_path), "passkey_haystack": "filler"})]))


def test_pretrained_and_checkpoint_dir_must_agree(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.model.adapter import LongShortLM

    with pytest.raises(ValueError, match="pretrained=.*checkpoint_dir=.*different"):
        LongShortLM(pretrained=str(tiny_llama2_dir), checkpoint_dir=str(tmp_path), tokenizer=str(sp_tokenizer_dir),
                    device="cpu")
    with pytest.raises(ValueError, match="needs pretrained="):
        LongShortLM(tokenizer=str(sp_tokenizer_dir), device="cpu")


def test_a_checkpoint_transformers_cannot_run_is_refused_for_hf(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """A CLEX checkpoint (its learned ODE has no transformers equivalent): transformers raises a KeyError while
    building it, so ``--model hf`` (any model but ``longshort``) is refused before lm-eval starts, in one line that
    names the folder and the model to use; ``--model longshort`` takes it; a YaRN checkpoint, which transformers
    runs, is not refused."""
    from transformers import AutoModelForCausalLM

    from torchtune_longshort.models import load_hf_checkpoint, read_hf_config, rope_scaled, write_hf_checkpoint

    folders = {}
    for method in ("clex", "yarn"):
        model = rope_scaled(load_hf_checkpoint(tiny_llama2_dir), method, 4 * 256)
        folders[method] = write_hf_checkpoint(tmp_path / method, model.state_dict(), read_hf_config(tiny_llama2_dir),
                                              rope_spec=model.rope_scaling, tokenizer=sp_tokenizer_dir)
    with pytest.raises(KeyError, match="longshort-clex"):
        AutoModelForCausalLM.from_pretrained(folders["clex"])
    for model in ("hf", None):
        argv = ["run", *(["--model", model] if model else []), "--model_args",
                f"pretrained={folders['clex']},dtype=float32", "--tasks", "longshort_ppl"]
        with pytest.raises(ValueError, match=r"^--model_args pretrained=\S+clex: its RoPE \(clex\) is not "
                                             r"representable in transformers.*--model hf cannot load it; evaluate it "
                                             r"with --model longshort$"):
            lm_eval_argv(argv)
    lm_eval_argv(["run", "--model", "longshort", "--model_args", f"pretrained={folders['clex']}"])
    lm_eval_argv(["run", "--model", "hf", "--model_args", f"pretrained={folders['yarn']}"])


def test_a_rope_method_or_lengths_typo_is_refused_before_lm_eval_starts(tiny_llama2_dir, sp_tokenizer_dir):
    # both were refused only while lm-eval built the model or the task, after its start-up log
    for args, match in [(["--model", "longshort", "--model_args", f"pretrained={tiny_llama2_dir},rope=yarnn"],
                         r"rope='yarnn' is not a RoPE method \(did you mean 'yarn'\?\)"),
                        (["--model", "hf", "--metadata", '{"ppl_max_seq_lengths": "abc"}'],
                         r"--metadata ppl_max_seq_lengths='abc': \['abc'\] not accepted"),
                        # a RoPE parameter's own check named it without the rope_ the user typed ("factor=0.5")
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=yarn,rope_factor=0.5"],
                         r"^rope_factor=0.5 is not accepted: expected a number >= 1"),
                        # a misspelled parameter: a TypeError traceback naming 'fctor', once the model was built
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=yarn,rope_fctor=2"],
                         r"rope_fctor=2 is not a parameter of RoPE method 'yarn' \(did you mean 'rope_factor'\?\): it "
                         r"takes \['rope_alpha'"),
                        # CLEX's factor is t_max; the hint was rope_param_factor, the width of its ODE
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=clex,rope_factor=2"],
                         r"rope_factor=2 is not a parameter of RoPE method 'clex' \(did you mean 'rope_t_max'\?\)"),
                        # LongRoPE without its factor lists (a TypeError traceback)
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=longrope"],
                         r"missing 2 required keyword-only arguments: 'short_factor' and 'long_factor': give it as "
                         r"rope_<name>= in --model_args \(a list cannot be given there"),
                        # a factor from max_length below the pre-trained positions: refused by the build, after
                        # lm-eval's start-up, naming max_seq_len, which the user never typed
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=yarn,max_length=128"],
                         r"rope=yarn without rope_factor scales to max_length=128, below the 256 positions .* "
                         r"\(factor 128/256 < 1\): give rope_factor=<s >= 1>, or max_length="),
                        # CLEX's scale is t_max (an integer, max_length // the pre-trained positions): below them
                        # the build refused naming max_seq_len and t_max, neither typed; between two multiples the
                        # positions past t_max x 256 ran at t_max, covered as the verdict said, unsaid
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=clex,max_length=128"],
                         r"rope=clex without rope_t_max scales to max_length=128, below the 256 positions .* "
                         r"\(t_max 128/256 < 1\): give rope_t_max=<an integer >= 1>, or max_length="),
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=clex,max_length=384"],
                         r"rope=clex without rope_t_max scales to max_length=384 by an integer t_max=1, which covers "
                         r"256 of its positions .*: give rope_t_max=2$"),
                        # rope_max_seq_len, named as typed with its fix: the build said "pass factor >= 1 ... or a
                        # longer max_seq_len", CLEX no fix, 'abc' Python's int() error; 0 was taken without a word
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=yarn,rope_max_seq_len=128"],
                         r"^rope=yarn,rope_max_seq_len=128: rope_max_seq_len=128 is below the 256 pre-trained "
                         r"positions .*: give rope_max_seq_len >= 256 \(the length to scale to\), or rope_factor="),
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=clex,rope_t_max=4,"
                          "rope_max_seq_len=512"],
                         r"^rope_max_seq_len=512 is too short .*: give rope_max_seq_len >= 1024, or rope_t_max <= 2$"),
                        *[(["--model", "longshort", "--device", "cpu", "--model_args",
                            f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=yarn,"
                            f"rope_max_seq_len={v}"],
                           rf"^rope_max_seq_len={v!r} is not accepted: expected a token count >= 1")
                          for v in ("abc", 0)],
                        # past what the override's own scaling reaches: positions 512-2047 extrapolated unsaid, and
                        # rope=default ran plain RoPE past its positions with no verdict
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=linear,rope_factor=2,"
                          "rope_max_seq_len=2048"],
                         r"rope_max_seq_len=2048 is past the 512 positions rope_factor=2 scales the 256 pre-trained "
                         r"positions to: give rope_factor=8, or rope_max_seq_len <= 512"),
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=default,"
                          "rope_max_seq_len=512"],
                         r"RoPE method 'default' scales nothing, so rope_max_seq_len=512 is past the 256 pre-trained "
                         r"positions it covers: give a method that scales \(rope=yarn,rope_factor=2\)"),
                        # the checkpoint's pairing of dimensions, not the scaling's: taken, it rotated the wrong pairs
                        (["--model", "longshort", "--device", "cpu", "--model_args",
                          f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=yarn,rope_factor=2,"
                          "rope_layout=half"],
                         r"^longshort model: rope_layout=half: which dimensions RoPE pairs is the checkpoint's .*: "
                         r"leave rope_layout out$"),
                        # the override under hf: transformers' 61-line TypeError after lm-eval's start-up
                        (["--model", "hf", "--model_args", f"pretrained={tiny_llama2_dir},rope=yarn,rope_factor=2"],
                         r"--model_args rope=yarn: a RoPE override is the longshort model's \(--model longshort\); "
                         r"--model hf takes none")]:
        with pytest.raises(ValueError, match=match):
            check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", *args]))
    # transformers' own config override under hf (rope_theta=), no rope=: passed on
    check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", "--model", "hf", "--model_args",
                                  f"pretrained={tiny_llama2_dir},rope_theta=500000"]))
    check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", "--model", "longshort", "--model_args",
                                  f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},rope=yarn,rope_factor=2",
                                  "--device", "cpu", "--metadata",
                                  '{"max_seq_lengths": "1k,2k"}']))


def test_a_rope_override_that_scales_nothing_is_said(tiny_llama2_dir, sp_tokenizer_dir, caplog):
    """rope=yarn with neither rope_factor nor a max_length past the checkpoint's positions is factor 1: the
    checkpoint's own RoPE, evaluated under the name of a scaling without a word. Said where the model is built;
    a factor, a longer max_length or a method whose rotation follows the length (dynamic NTK) says nothing."""
    from torchtune_longshort.eval.model.args import load_checkpoint_model, parse_model_args

    def note(**kw):
        return parse_model_args(pretrained=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir), device="cpu",
                                **kw).rope_note

    said = note(rope="yarn")
    assert said and "rope=yarn without rope_factor scales to max_length=256, the 256 positions" in said
    assert "factor 1, the checkpoint's RoPE unscaled" in said
    assert note(rope="yarn", max_length=256) == said
    assert note(rope="yarn", rope_factor=2) is None and note(rope="yarn", max_length=512) is None
    assert note(rope="dynamic_ntk") is None and note() is None
    with caplog.at_level("WARNING"):
        load_checkpoint_model(parse_model_args(pretrained=str(tiny_llama2_dir), tokenizer=str(sp_tokenizer_dir),
                                               device="cpu", rope="ntk"))
    assert [r.getMessage() for r in caplog.records if "without rope_factor" in r.getMessage()] == [
        note(rope="ntk")]


def test_a_config_yamls_model_and_metadata_reach_the_wrapper_and_the_tasks(tiny_llama2_dir, sp_tokenizer_dir,
                                                                           tmp_path):
    """lm-eval's ``--config`` / ``-C`` YAML: its ``metadata:`` was replaced whole by the ``--metadata`` the wrapper
    adds (the run waited on the hub for pg19 and scored NaN at the default lengths, exit 0) and its ``model:
    longshort`` was named ``hf`` to the tasks. The same evaluation from a YAML scores what the command line scores; a
    command-line option still wins over the YAML, as in lm-eval; an unknown key is refused in one line."""
    import yaml

    args = {"pretrained": str(tiny_llama2_dir), "tokenizer": str(sp_tokenizer_dir)}
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump({"model": "longshort", "model_args": args, "tasks": ["longshort_ppl"],
                                      "batch_size": 2, "device": "cpu", "metadata": json.loads(META),
                                      "output_path": str(tmp_path / "yaml")}))
    argv = lm_eval_argv(["run", "-C", str(config), "--model_args", "pretrained=/elsewhere"])
    assert json.loads(argv[argv.index("--metadata") + 1])["max_seq_lengths"] == [128]
    assert [a for a in argv if "pretrained=" in a] == ["pretrained=/elsewhere"]  # the command line's, whole
    assert json.loads(argv[-1]) == {"lm_eval_model": "longshort"}
    from_yaml = run_cli(["run", "--config", str(config)])
    on_the_line = _run("longshort", ",".join(f"{k}={v}" for k, v in args.items()), tmp_path / "line")
    scored = [r["results"]["longshort_ppl"]["ppl_128,none"] for r in (from_yaml, on_the_line)]
    assert scored[0] == scored[1] and scored[0] == scored[0]  # not NaN
    config.write_text("modle: longshort\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'modle' \(did you mean 'model'\?\)"):
        lm_eval_argv(["run", "--config", str(config)])


def test_batch_size_auto_runs_and_its_results_record_it(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, capsys,
                                                        monkeypatch):
    """lm-eval users type ``--batch_size auto`` by habit: the longshort model refused it (``batch_size='auto' is not
    supported by the longshort model; give an integer``, exit 2), and ignored ``max_batch_size``. Now it runs: the
    results' config says auto, records the batches it ran (``batch_sizes``, as lm-eval's ``hf`` records its detected
    sizes) and the ``max_batch_size`` it started from; ``auto:0``, ``auto:x`` and ``max_batch_size=0`` are refused in
    one line, exit 2, before anything loads."""
    import sys

    from torchtune_longshort.eval.__main__ import main

    args = ["run", "--model", "longshort", "--model_args", f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}",
            "--device", "cpu", "--tasks", "longshort_ppl", "--metadata", META]
    for extra, needle in [(["--batch_size", "auto:0"], "batch_size='auto:0' is not accepted: auto, auto:N with N a "
                                                       "positive integer"),
                          (["--batch_size", "auto:x"], "batch_size='auto:x' is not accepted"),
                          (["--batch_size", "auto", "--max_batch_size", "0"], "max_batch_size='0' must be a positive "
                                                                              "integer")]:
        monkeypatch.setattr(sys, "argv", ["longshort-eval", *args, *extra, "--output_path", str(tmp_path / "no")])
        with pytest.raises(SystemExit) as e:
            main()
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("longshort-eval: error: ") and \
            needle in err, err
    assert not (tmp_path / "no").exists()
    got = run_cli(args + ["--batch_size", "auto", "--output_path", str(tmp_path / "auto")])
    assert got["config"]["batch_size"] == "auto" and got["config"]["max_batch_size"] == 64
    assert got["config"]["batch_sizes"] == [2], got["config"]["batch_sizes"]  # 2 samples of 128 tokens: one batch
    assert got["results"]["longshort_ppl"]["ppl_128,none"] > 1
