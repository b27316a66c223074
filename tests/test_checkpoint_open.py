"""One checkpoint-open-and-check path (``models.checkpoint_open``) for the ``longshort`` eval model, the misalignment
CLI and the study's pre-flight: for the same folder, tokenizer and length the three report the same usable positions
and the same verdict past them (the eval model logs a refusal or, allowed, an extrapolation; the CLI refuses in one
line or, allowed, notes it; the study, whose evaluations always allow it, logs the extrapolation).

References: the positions are written here, not computed by the project: the tiny checkpoint's 256 positions
(``conftest.tiny_llama2_dir``), and a copy scaled linearly by 2 covering 256 x 2 = 512. Then the owner's
``usable_length_of`` is replaced by a stand-in: every caller follows it, so a caller that computed the length (or
the verdict) on its own fails here."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.eval.model.args import load_checkpoint_model, parse_model_args
from torchtune_longshort.metrics.cli import main as misalignment_main
from torchtune_longshort.models import checkpoint_open
from torchtune_longshort.models.hf_rope import update_hf_config
from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.preflight import preflight

from clex_step import PLAIN, write_clex_step

ROOT = Path(__file__).resolve().parents[1]
FACTOR = 2.0


@pytest.fixture(scope="module")
def folders(tiny_llama2_dir, tmp_path_factory):
    """``{name: (folder, positions it covers)}``: the tiny checkpoint, and a copy whose config.json scales its RoPE
    linearly by ``FACTOR`` (as the project writes it: transformers' entries + the ``longshort_rope`` spec)."""
    scaled = tmp_path_factory.mktemp("linear") / "ckpt"
    shutil.copytree(tiny_llama2_dir, scaled)
    config = json.loads((scaled / "config.json").read_text())
    spec = {"method": "linear", "factor": FACTOR, "max_seq_len": int(PLAIN * FACTOR), "original_max_seq_len": PLAIN,
            "base": float(config.get("rope_theta", 10_000.0))}  # transformers' default: the tiny config names none
    (scaled / "config.json").write_text(json.dumps(update_hf_config(config, spec)))
    return {"plain": (Path(tiny_llama2_dir), PLAIN), "linear": (scaled, int(PLAIN * FACTOR))}


def _eval_model(folder, tok, length, caplog, allow=False, **rope):
    """(usable, verdict, message) of the eval model's arguments: the verdict read from what it logged when built."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="torchtune_longshort.eval.model.args"):
        args = parse_model_args(pretrained=str(folder), tokenizer=str(tok), max_length=length, device="cpu",
                                allow_extrapolation=allow, **rope)
        load_checkpoint_model(args)
    recs = [r for r in caplog.records if "positions checkpoint" in r.getMessage()]
    verdict = {0: "allowed", logging.WARNING: "extrapolated", logging.ERROR: "refused"}[recs[-1].levelno if recs else 0]
    return args.usable_length, verdict, recs[-1].getMessage() if recs else ""


def _cli(folder, tok, length, tmp_path, capsys):
    """(usable, verdict, message) of ``longshort-misalignment``: a refusal's line, else its JSON (one sample)."""
    out = tmp_path / f"mis_{length}.json"
    argv = ["--checkpoint-dir", str(folder), "--tokenizer", str(tok), "--length", str(length), "--num-samples", "1",
            "--divergences", "sce", "--output", str(out)]
    capsys.readouterr()
    try:
        misalignment_main(argv)
    except SystemExit as e:
        assert e.code == 2 and not out.exists()
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        return int(re.search(r"past the (\d+) positions", err).group(1)), "refused", err
    res = json.loads(out.read_text())
    return res["usable_length"], "extrapolated" if res["extrapolated"] else "allowed", ""


def _study(folder, tok, length, tmp_path):
    """(usable, verdict, message) of the study's pre-flight on a config whose base is ``folder``."""
    raw = yaml.safe_load((ROOT / "configs/study/cpu_small.yaml").read_text())
    raw["base"] = {"checkpoint_dir": str(folder), "tokenizer": str(tok)}
    raw["model"] = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": None}  # the base's shape
    raw["quick"].pop("base", None)
    raw["quick"]["eval"].update(ppl_lengths=[], passkey_lengths=[], misalignment_lengths=[], babilong=None,
                                max_length=length)
    path = tmp_path / f"study_{length}.yaml"
    path.write_text(yaml.safe_dump(raw))
    study = Study(load_study_config(path, quick=True, repo_root=ROOT), output_dir=tmp_path / "out", repo_root=ROOT,
                  log=lambda m: None)
    logs = []
    preflight(study, log=logs.append)
    line = next(m for m in logs if "pre-flight: base" in m)
    verdict = "extrapolated" if "is past the" in line else "allowed"
    return int(re.search(r"covers (\d+) positions", line).group(1)), verdict, line


@pytest.mark.parametrize("name", ["plain", "linear"])
def test_the_three_callers_agree_on_the_positions_and_the_verdict(name, folders, sp_tokenizer_dir, tmp_path, caplog,
                                                                   capsys):
    folder, usable = folders[name]
    past = usable + 64
    assert _eval_model(folder, sp_tokenizer_dir, usable, caplog) == (usable, "allowed", "")
    assert _study(folder, sp_tokenizer_dir, usable, tmp_path)[:2] == (usable, "allowed")
    got, verdict, msg = _eval_model(folder, sp_tokenizer_dir, past, caplog)
    assert (got, verdict) == (usable, "refused")
    mpe = json.loads((folder / "config.json").read_text())["max_position_embeddings"]
    for needle in (f"max_length={past} is past the {usable} positions checkpoint", f"max_position_embeddings={mpe}",
                   "RoPE scaling=None" if name == "plain" else "'method': 'linear', 'factor': 2.0",
                   f"requests longer than {usable} tokens will be refused", f"max_length <= {usable}",
                   "rope=<method>,rope_factor=<f>", "allow_extrapolation=true"):
        assert needle in msg, msg
    got, verdict, msg = _cli(folder, sp_tokenizer_dir, past, tmp_path, capsys)
    assert (got, verdict) == (usable, "refused")
    assert f"--length={past} is past the {usable} positions" in msg and "--allow-extrapolation" in msg
    # the study evaluates with allow_extrapolation=true: past the positions it extrapolates, as the eval model does
    assert _eval_model(folder, sp_tokenizer_dir, past, caplog, allow=True)[:2] == (usable, "extrapolated")
    got, verdict, msg = _study(folder, sp_tokenizer_dir, past, tmp_path)
    assert (got, verdict) == (usable, "extrapolated")
    assert f"eval.max_length={past} is past the {usable} positions" in msg and f"max_position_embeddings={mpe}" in msg
    if name == "linear":  # within the positions, the CLI measures (one sample) and records them
        assert _cli(folder, sp_tokenizer_dir, usable, tmp_path, capsys)[:2] == (usable, "allowed")


def test_a_scaling_override_covers_the_positions_times_its_factor(folders, sp_tokenizer_dir, caplog):
    """The eval model's ``rope=linear,rope_factor=2`` on the plain folder: max_position_embeddings x factor; without
    a factor the method scales to ``max_length`` (factor max_length / L), which it then covers."""
    folder, _ = folders["plain"]
    want = int(PLAIN * FACTOR)
    assert _eval_model(folder, sp_tokenizer_dir, want, caplog, rope="linear", rope_factor=FACTOR) == (want, "allowed",
                                                                                                     "")
    assert _eval_model(folder, sp_tokenizer_dir, want + 1, caplog, rope="linear", rope_factor=FACTOR)[:2] == (
        want, "refused")
    assert _eval_model(folder, sp_tokenizer_dir, 3 * PLAIN, caplog, rope="linear") == (3 * PLAIN, "allowed", "")
    # On a scaled folder (PLAIN pre-trained positions, max_position_embeddings PLAIN x FACTOR, as Llama-3.1's 8k of
    # 128k) the override's factor scales the pre-trained PLAIN, as the model is built: it covered PLAIN x FACTOR^2
    # before, so requests past its scaling ran without a word
    scaled, _ = folders["linear"]
    assert _eval_model(scaled, sp_tokenizer_dir, None, caplog, rope="yarn", rope_factor=FACTOR) == (want, "allowed", "")
    assert _eval_model(scaled, sp_tokenizer_dir, want + 1, caplog, rope="yarn", rope_factor=FACTOR)[:2] == (
        want, "refused")
    # CLEX scales by t_max (inference caps t there): 3 x PLAIN ran past L * t_max unsaid, and without max_length
    # the model was built for PLAIN positions, which the build refused ("max_seq_len=... is too short")
    assert _eval_model(folder, sp_tokenizer_dir, None, caplog, rope="clex", rope_t_max=2) == (want, "allowed", "")
    assert _eval_model(folder, sp_tokenizer_dir, 3 * PLAIN, caplog, rope="clex", rope_t_max=2)[:2] == (
        want, "refused")
    # a method with no factor scales nothing with max_length: plain RoPE, ABF, EABF cover the pre-trained positions
    # (rope=default,max_length=3 PLAIN covered 3 PLAIN, and scored requests past PLAIN with plain RoPE unsaid)
    for method, kw in (("default", {}), ("abf", {"rope_new_base": 40000}), ("eabf", {})):
        assert _eval_model(folder, sp_tokenizer_dir, 3 * PLAIN, caplog, rope=method, **kw)[:2] == (PLAIN, "refused")
    # a factor the build refuses, named as typed: rope_factor=-2 was "max_seq_len=-<2 PLAIN>", abc Python's float error
    for bad in (-2, 0, "abc"):
        with pytest.raises(ValueError, match=rf"^rope_factor={bad!r} is not accepted: expected a number >= 1"):
            _eval_model(folder, sp_tokenizer_dir, None, caplog, rope="linear", rope_factor=bad)


@pytest.mark.parametrize("rope, fix", [
    ({"rope": "yarn", "rope_factor": FACTOR}, r"rope_factor=3 \(the override rope=yarn,rope_factor=2.0 covers fewer"),
    ({"rope": "clex", "rope_t_max": 2}, r"rope_t_max=3 \(the override rope=clex,rope_t_max=2 covers fewer"),
    ({"rope": "default"}, r"a method that scales with the length, e.g. rope=yarn,rope_factor=3 \(the override "
                          r"rope=default covers the 256 pre-trained positions only\)"),
], ids=["yarn", "clex", "default"])
def test_past_an_override_the_fix_names_its_own_scaling(folders, sp_tokenizer_dir, rope, fix):
    """``rope=yarn,rope_factor=2,max_length=3L``: the warning and each refused request said "Fix: pass
    rope=<method>,rope_factor=<f> to scale RoPE", what the user had passed; they now name the override's own
    parameter and the value that covers the length (CLEX: t_max; a method with no factor: another method)."""
    from torchtune_longshort.eval.model.limits import RequestLimits, RequestTooLong

    folder, _ = folders["plain"]
    args = parse_model_args(pretrained=str(folder), tokenizer=str(sp_tokenizer_dir), max_length=3 * PLAIN,
                            device="cpu", **rope)
    assert args.verdict.refused and re.search(fix, args.verdict.message), args.verdict.message
    assert "rope=<method>" not in args.verdict.message
    reason = RequestLimits.of_model_args(args).too_long_reason(RequestTooLong(3 * PLAIN - 20, args.usable_length,
                                                                              "loglikelihood"))
    assert re.search(rf"Fix: {fix}.*, or allow_extrapolation=true$", reason), reason


def test_every_caller_follows_the_owner(folders, sp_tokenizer_dir, tmp_path, caplog, capsys, monkeypatch):
    """The owner's usable length replaced by a stand-in (200 positions): the eval model, the CLI and the study all
    report it, so none of them computes the length or the verdict on its own."""
    folder, _ = folders["plain"]
    monkeypatch.setattr(checkpoint_open, "usable_length_of", lambda config, spec: 200)
    assert _eval_model(folder, sp_tokenizer_dir, PLAIN, caplog)[:2] == (200, "refused")
    assert _cli(folder, sp_tokenizer_dir, PLAIN, tmp_path, capsys)[:2] == (200, "refused")
    assert _study(folder, sp_tokenizer_dir, PLAIN, tmp_path)[:2] == (200, "extrapolated")


def test_a_tokenizer_past_the_vocabulary_is_refused_by_the_study_before_any_run(family_dirs, tmp_path):
    """The study's base opened with its eval tokenizer: one that does not fit the model is refused in the
    pre-flight (naming base.tokenizer and both sizes), as the eval model would refuse it."""
    from torchtune_longshort.study import StudyConfigError

    small = tmp_path / "small"
    shutil.copytree(family_dirs["smollm2"], small)
    config = json.loads((small / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**config, "vocab_size": 300}))
    with pytest.raises(StudyConfigError, match=r"base.tokenizer= .*has 500 ids \(up to 499\), past the 300 rows"):
        _study(small, family_dirs["qwen2"], 256, tmp_path)
    assert not (tmp_path / "out").exists()


def test_longshort_eval_says_an_extrapolation_once(folders, sp_tokenizer_dir, caplog, capsys):
    """``longshort-eval run --model longshort`` checks the model's arguments before lm-eval starts
    (``check_arguments``), then lm-eval builds the model: a ``max_length`` past the positions with
    ``allow_extrapolation=true`` was said by both (SmolLM2 at max_length=9000: the line twice)."""
    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv
    from torchtune_longshort.eval.model.adapter import LongShortLM

    folder, usable = folders["plain"]
    model_args = {"pretrained": str(folder), "tokenizer": str(sp_tokenizer_dir), "max_length": usable + 64,
                  "allow_extrapolation": "true"}
    argv = lm_eval_argv(["run", "--model", "longshort", "--model_args", ",".join(f"{k}={v}" for k, v in
                                                                                model_args.items()),
                         "--device", "cpu", "--tasks", "longshort_ppl", "--metadata",
                         f'{{"max_seq_lengths": "{usable}"}}'])  # within max_length (the lengths past it are refused)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        check_arguments(argv)
        LongShortLM(**model_args, device="cpu")
    said = [r for r in caplog.records if f"is past the {usable} positions" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING and "extrapolates" in said[0].getMessage(), said


@pytest.fixture(scope="module")
def clex_folder(tiny_llama2_dir, sp_tokenizer_dir, tmp_path_factory):
    return write_clex_step(tiny_llama2_dir, sp_tokenizer_dir, tmp_path_factory.mktemp("clex") / "step")


def _notes(caplog):
    return [r for r in caplog.records if "replaces the RoPE scaling" in r.getMessage()]


def test_an_override_says_what_it_replaces_in_a_scaled_checkpoint(folders, clex_folder, sp_tokenizer_dir, tmp_path,
                                                                  caplog, capsys):
    """A rope= override on a checkpoint with a scaling of its own (a scaled step; a Llama-3.1-style ``rope_scaling``
    in config.json) replaced it without a word; it is now said in one line, by the eval model (once, where it is
    built) and by ``longshort-misalignment --rope`` (which had no override; its JSON records it). Over plain RoPE
    there is nothing to say. Over a CLEX step, another method says its learned ODE is not used."""
    _eval_model(folders["plain"][0], sp_tokenizer_dir, None, caplog, rope="yarn", rope_factor=FACTOR)
    assert not _notes(caplog)
    llama3 = tmp_path / "llama3"
    shutil.copytree(folders["plain"][0], llama3)
    config = json.loads((llama3 / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": PLAIN // 2}
    (llama3 / "config.json").write_text(json.dumps(config))
    for folder, own, original in ((folders["linear"][0], "'method': 'linear'", PLAIN),
                                  (llama3, "'method': 'llama3'", PLAIN // 2), (clex_folder, "'method': 'clex'", PLAIN)):
        _eval_model(folder, sp_tokenizer_dir, None, caplog, rope="yarn", rope_factor=FACTOR)
        said = [r.getMessage() for r in _notes(caplog)]
        assert len(said) == 1 and _notes(caplog)[0].levelno == logging.WARNING, said
        assert said[0].startswith(f"rope=yarn,rope_factor={FACTOR} replaces the RoPE scaling of checkpoint "
                                  f"{str(folder)!r} ({{{own}") and f"scales its {original} pre-trained" in said[0]
        assert ("learned clex parameters" in said[0]) == (folder == clex_folder)
    assert said[0].endswith("are not used (the weights run without them): leave out rope= to evaluate the step as "
                            "trained, or give rope=clex to keep them"), said[0]
    out = tmp_path / "mis.json"
    capsys.readouterr()
    assert misalignment_main(["--checkpoint-dir", str(folders["linear"][0]), "--tokenizer", str(sp_tokenizer_dir),
                              "--length", "64", "--num-samples", "1", "--divergences", "sce", "--rope",
                              "yarn,rope_factor=2", "--output", str(out)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "replaces" in line]
    assert err == [err[0]] and err[0].startswith("longshort-misalignment: note: --rope yarn,rope_factor=2 replaces")
    res = json.loads(out.read_text())
    # the spec the model was built with, start length and base included (the folder's linear spec records both):
    # {method, factor} alone rebuilt elsewhere scaled from config.json's max_position_embeddings, 512, not 256
    assert (res["rope_override"], res["rope_scaling"]) == ("yarn,rope_factor=2", {
        "method": "yarn", "factor": 2, "original_max_seq_len": PLAIN, "base": 10_000.0})
    assert res["usable_length"] == int(PLAIN * FACTOR)


@pytest.mark.parametrize("rope, said", [
    ("yarn,rope_fctor=2", r"--rope: rope_fctor=2 is not a parameter of RoPE method 'yarn' \(did you mean "
                          r"'rope_factor'\?\)"),
    ("yarn,factor=2", r"'factor=2' is not rope_<param>=<value>: give e.g. --rope yarn,rope_factor=2"),
    ("yarn", r"--rope yarn without rope_factor scales to --length=64, below the 256 positions"),
    ("linear,rope_factor=2,rope_max_seq_len=2048", r"rope_max_seq_len=2048 is past the 512 positions rope_factor=2"),
    # CLEX's scale, t_max: refused after a note by the build, naming its max_seq_len and t_max
    ("clex", r"--rope clex without rope_t_max scales to --length=64, below the 256 positions .* \(t_max 64/256 < 1\)"),
    # a parameter given twice ran with the last one; a misspelled method was named as the eval's rope=
    ("yarn,rope_factor=2,rope_factor=3", r"rope_factor is given twice \(rope_factor=2, rope_factor=3\): give it once"),
    ("yarnn,rope_factor=2", r"^longshort-misalignment: error: --rope='yarnn' is not a RoPE method \(did you mean "
                            r"'yarn'\?\)"),
    # a value's own check, named without the --rope its other refusals carry
    ("yarn,rope_factor=abc", r"^longshort-misalignment: error: --rope: rope_factor='abc' is not accepted: expected a "
                             r"number >= 1"),
    ("yarn,rope_factor=2,rope_max_seq_len=abc", r"^longshort-misalignment: error: --rope: rope_max_seq_len='abc' is "
                                                r"not accepted: expected a token count"),
], ids=["typo", "unprefixed", "factor_below_one", "max_seq_len_past", "clex_t_max_below_one", "given_twice",
        "method_typo", "factor_not_a_number", "max_seq_len_not_a_length"])
def test_misalignment_rope_is_the_evals_override(folders, sp_tokenizer_dir, tmp_path, capsys, rope, said):
    """``--rope`` takes the eval's ``rope_<param>=`` spelling through the same parser and checks: each refusal one
    line, nothing written."""
    out = tmp_path / "mis.json"
    with pytest.raises(SystemExit) as exit_info:
        misalignment_main(["--checkpoint-dir", str(folders["plain"][0]), "--tokenizer", str(sp_tokenizer_dir),
                           "--length", "64", "--rope", rope, "--output", str(out)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and re.search(said, err), err
    assert not out.exists()
