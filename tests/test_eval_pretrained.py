"""``pretrained=`` for the ``longshort`` model, as lm-eval users type it (``checkpoint_dir=`` still works), and
results folders named after the checkpoint exactly as lm-eval's own ``hf`` model names them, and the same provenance
recorded for an ``hf`` run through ``longshort-eval`` as for a ``longshort`` one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv, run_cli  # noqa: E402

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


def _refused_before_lm_eval(cases):
    """Each ``(args, match)``: ``longshort-eval run --tasks longshort_ppl <args>`` refused by the argument check
    (before lm-eval starts) with a ``ValueError`` matching ``match``."""
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", *args]))


def test_a_rope_method_or_lengths_typo_is_refused_before_lm_eval_starts(tiny_llama2_dir, sp_tokenizer_dir):
    # both were refused only while lm-eval built the model or the task, after its start-up log
    _refused_before_lm_eval([
        (["--model", "longshort", "--model_args", f"pretrained={tiny_llama2_dir},rope=yarnn"],
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
         r"rope_<name>= in --model_args \(a list cannot be given there")
    ])


def test_a_rope_length_layout_or_hf_override_is_refused_before_lm_eval_starts(tiny_llama2_dir, sp_tokenizer_dir):
    # refused only while lm-eval built the model, after its start-up log (split from the test above)
    _refused_before_lm_eval([
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
         r"--model hf takes none")
    ])


def test_a_config_override_under_hf_and_a_good_override_pass_the_argument_check(tiny_llama2_dir, sp_tokenizer_dir):
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
    # auto:0 and auto:x are the flag's (9b60e56: refused by the command line, naming --batch_size, before the model);
    # max_batch_size 0 too (leftalone46, naming --max_batch_size)
    for extra, needle in [(["--batch_size", "auto:0"], "--batch_size auto:0: give a whole number (e.g. 8), auto, or "
                                                       "auto:N (N a finite positive number"),
                          (["--batch_size", "auto:x"], "--batch_size auto:x: give a whole number"),
                          (["--batch_size", "auto", "--max_batch_size", "0"], "--max_batch_size 0 is not accepted: "
                                                                              "give a whole number, 1 or more")]:
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
