"""The report command on hand-made lm-eval results: table cells equal the JSON values, heatmaps for passkey and
BABILong-style ``acc_<len>_d<depth>`` keys, per-position curve from samples."""

from __future__ import annotations

import csv
import json

import pytest

from torchtune_longshort.eval.tasks.common.lengths import length_label, parse_length, parse_lengths
from torchtune_longshort.eval.report import build_report, main
from plot_helpers import assert_png_drawn
from report_runs import lm_eval_run as _run


def _write(d, results, samples=None):
    d.mkdir(parents=True)
    (d / "results_2026-01-01T00-00-00.json").write_text(json.dumps({"results": results}))
    for task, rows in (samples or {}).items():
        (d / f"samples_{task}_2026-01-01T00-00-00.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_tables_plots_and_curve(tmp_path):
    base = {
        "longshort_ppl": {"ppl_2k,none": 7.5, "ppl_2k_stderr,none": "N/A", "ppl_512,none": 9.25,
                          "token_nll_2k,none": 2.0},
        "longshort_passkey": {"acc,none": 0.5, "acc_2k,none": 0.5, "acc_2k_d0,none": 1.0, "acc_2k_d50,none": 0.0,
                              "digits,none": 0.75, "digits_2k,none": 0.75, "digits_2k_d0,none": 1.0,
                              "digits_2k_d50,none": 0.5},
        "longshort_babilong": {"acc,none": 0.3, "acc_4k_d50,none": 0.25, "acc_8k_d50,none": 0.125},
    }
    ours = {"longshort_ppl": {"ppl_2k,none": 6.5, "ppl_512,none": 8.0}}
    curve_rows = [{"curve_mean_nll_3": [1.0, 2.0, 3.0]}, {"curve_mean_nll_3": [3.0, 2.0, 1.0]},
                  {"curve_mean_nll_4": [5.0, 5.0, 5.0, 5.0]}]
    _write(tmp_path / "base", base)
    _write(tmp_path / "ours", ours, {"longshort_ppl": curve_rows})
    out = tmp_path / "rep"
    main([str(tmp_path / "base"), str(tmp_path / "ours"), "--out", str(out), "--labels", "baseline,longshort"])
    md = (out / "report.md").read_text()
    assert "| run | 512 | 2k |" in md  # columns sorted by token length, not as strings
    assert "| baseline | 9.25 | 7.5 |" in md and "| longshort | 8 | 6.5 |" in md
    summary = json.loads((out / "summary.json").read_text())
    assert summary["longshort_ppl"]["ppl"]["longshort"] == {"512": 8.0, "2k": 6.5}
    assert summary["tasks"]["longshort_babilong"]["baseline"]["acc_4k_d50"] == 0.25
    # every metric of a length-swept task is somewhere: passkey's digits and its values over all lengths, ppl's
    # token_nll (the report showed only the first metric's length table; an audit)
    assert "### longshort_passkey: digits by length (tokens)" in md and "### longshort_passkey: over all lengths" in md
    # not the depth cells, acc's or digits' (the digits cells were listed as values over all lengths, undrawn)
    assert summary["tasks"]["longshort_passkey"]["baseline"] == {"acc": 0.5, "digits": 0.75}
    assert "digits_2k_d0" not in md
    assert summary["longshort_passkey"]["digits"]["baseline"] == {"2k": 0.75}
    assert summary["longshort_ppl"]["token_nll"]["baseline"] == {"2k": 2.0}
    for f in ("ppl_vs_length.png", "heatmap_longshort_passkey_baseline.png", "heatmap_longshort_babilong_baseline.png",
              "heatmap_longshort_passkey_digits_baseline.png", "per_position_loss.png"):
        assert_png_drawn(out / f)
    rows = list(csv.DictReader((out / "per_position_loss.csv").open()))
    assert [float(r["mean_nll"]) for r in rows if r["length"] == "3"] == [2.0, 2.0, 2.0]
    assert [float(r["mean_nll"]) for r in rows if r["length"] == "4"] == [5.0] * 4
    assert summary["per_position_mean_nll"]["longshort"]["3"] == pytest.approx(2.0)
    import torch

    assert summary["provenance"]["packages"]["torch"] == torch.__version__
    assert summary["run_provenance"] == {"baseline": None, "longshort": None}  # hand-made files carry none
    assert "## Provenance" in md and "Run `baseline`:" in md


def test_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="results_"):
        build_report([tmp_path], tmp_path / "o")
    _write(tmp_path / "a" / "x", {"t": {"m,none": 1}})
    with pytest.raises(ValueError, match="labels"):
        build_report([tmp_path / "a"], tmp_path / "o", labels=["a", "b"])
    _write(tmp_path / "b" / "x", {"t": {"m,none": 2}})
    with pytest.raises(ValueError, match=r"--labels ',b' holds an empty name"):  # a blank row in every table
        build_report([tmp_path / "a", tmp_path / "b"], tmp_path / "o", labels=["", "b"])
    with pytest.raises(ValueError, match=r"not unique: give each run its own$"):  # it said "pass --labels"
        build_report([tmp_path / "a", tmp_path / "b"], tmp_path / "o", labels=["a", "a"])
    with pytest.raises(ValueError, match=r"not unique: pass --labels"):  # two folders named x
        build_report([tmp_path / "a" / "x", tmp_path / "b" / "x"], tmp_path / "o")
    assert not (tmp_path / "o").exists()
    assert parse_length("32k") == 32768 and parse_length("e") is None and parse_length("4k_d50") is None
    assert [length_label(n) for n in (0, 512, 1024, 3000, 32768)] == ["0k", "512", "1k", "3000", "32k"]
    assert parse_lengths("512, 1k") == [512, 1024] and parse_lengths([2048, "4k"]) == [2048, 4096]
    with pytest.raises(ValueError, match="max_seq_lengths='2q'"):
        parse_lengths("2q")


def test_partial_group_scores_are_marked(tmp_path):
    # LongBench-E with 2 of its 3 (toy) datasets present across nested groups; a complete group is left alone.
    d = tmp_path / "run"
    d.mkdir()
    data = {"results": {
        "longshort_longbench_e": {"score,none": 0.4, "missing_data,none": 1.0},
        "longshort_longbench_e_single": {"score,none": 0.4},
        "longshort_longbench_e_code": {"missing_data,none": 1.0},
        "longshort_longbench_qasper_e": {"score,none": 0.3}, "longshort_longbench_multifieldqa_en_e": {"score,none": 0.5},
        "longshort_longbench_lcc_e": {"missing_data,none": 1.0},
        "longshort_babilong": {"acc,none": 0.5}, "longshort_babilong_qa1": {"acc,none": 0.5},
    }, "group_subtasks": {
        "longshort_longbench_e": ["longshort_longbench_e_single", "longshort_longbench_e_code"],
        "longshort_longbench_e_single": ["longshort_longbench_qasper_e", "longshort_longbench_multifieldqa_en_e"],
        "longshort_longbench_e_code": ["longshort_longbench_lcc_e"],
        "longshort_babilong": ["longshort_babilong_qa1"],
    }}
    (d / "results_2026-01-01T00-00-00.json").write_text(json.dumps(data))
    out = tmp_path / "rep"
    summary = build_report([d], out)
    md = (out / "report.md").read_text()
    section = lambda t: md.split(f"### {t}\n", 1)[1].split("\n### ", 1)[0]  # noqa: E731
    # score over 2 of its 3 leaf datasets; the missing_data marker is no column (it read 1, lm-eval's mean over the
    # members that report it, for a group one of three lacked)
    assert "| run | 0.4 (2/3 tasks) |" in section("longshort_longbench_e")
    assert "missing_data" not in md and "### longshort_longbench_lcc_e\n" not in md
    assert "| run | 0.4 |" in section("longshort_longbench_e_single")  # complete: no mark
    assert "no value from longshort_longbench_lcc_e" in md
    part = summary["partial_groups"]["longshort_longbench_e"]["run"]["score"]
    assert part == {"present": ["longshort_longbench_qasper_e", "longshort_longbench_multifieldqa_en_e"], "missing": ["longshort_longbench_lcc_e"],
                    "total": 3}
    assert "longshort_babilong" not in summary.get("partial_groups", {})


def test_runs_show_samples_and_limit_and_unequal_counts_are_refused_unless_asked(tmp_path):
    full = _run(tmp_path / "full", 20)
    quick = _run(tmp_path / "quick", 3, limit=3)
    with pytest.raises(ValueError, match=r"the runs differ in --limit \(`full` all, `quick` 3\): their numbers are "
                                         r"not comparable\. Evaluate .* pass --allow-mixed") as e:
        build_report([full, quick], tmp_path / "no")
    assert "torch_dtype" not in str(e.value)  # the dtype explanation only where the dtype differs
    assert not (tmp_path / "no").exists()
    summary = build_report([full, quick], tmp_path / "rep", allow_unequal_samples=True)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| `full` |" in md and "| all † | longshort_ppl: 20 |" in md and "| 3 † | longshort_ppl: 3 |" in md
    assert "**† Mixed settings**" in md and "differ in --limit (`full` all, `quick` 3)" in md
    assert "**Unequal sample counts**" in md and "Runs `full`, `quick` evaluate the same checkpoint folder;" in md
    # equal --limit, unequal counts for no listed reason: refused as before
    other = _run(tmp_path / "other", 7, pretrained="/ckpt/c")
    with pytest.raises(ValueError, match=r"different numbers of samples \(longshort_ppl: `full` 20, `other` 7\)"):
        build_report([full, other], tmp_path / "no")
    assert summary["runs"]["quick"]["limit"] == 3 and summary["runs"]["full"]["samples"] == {"longshort_ppl": 20}
    main([str(full), str(quick), "--out", str(tmp_path / "cli"), "--allow-unequal-samples"])  # the flag
    # a difference with reasons is refused too: every model counts the samples it could not run (NaN, with the
    # reason), so one placeholder row standing for a whole length is not the same evaluation (issue 33 F11)
    short = _run(tmp_path / "short", 2, pretrained="/ckpt/b", reasons={"longshort_ppl at length 512: too long": 1})
    with pytest.raises(ValueError, match=r"different numbers of samples \(longshort_ppl: `full` 20, `short` 2\)"):
        build_report([full, short], tmp_path / "rep2")
    assert not (tmp_path / "rep2").exists()
    # a run that scored none of a task's samples (hf on longshort_misalignment: one placeholder row for the task) has
    # nothing to compare: it was refused as a count mismatch naming --limit, though both runs had the same
    none = _run(tmp_path / "none", 1, pretrained="/ckpt/c", model="hf",
                reasons={"longshort_ppl at length 128: needs --model longshort": 1})
    build_report([full, none], tmp_path / "rep3")
    md = (tmp_path / "rep3" / "report.md").read_text()
    assert "| longshort_ppl: 1 (none scored) |" in md and "Unequal sample counts" not in md
    assert "needs --model longshort" in md


def test_runs_of_different_dtype_are_refused_in_one_line_unless_asked(tmp_path, capsys):
    """The issue's case: lm-eval's hf model loaded a folder in bf16 beside a float32 longshort run of the same
    checkpoint; the report names each run's dtype and device, and refuses the pair unless told (then marks it)."""
    hf = _run(tmp_path / "hf", 20, model="hf", dtype="torch.bfloat16")
    ours = _run(tmp_path / "ours", 20)
    with pytest.raises(SystemExit) as e:
        main([str(hf), str(ours), "--out", str(tmp_path / "no")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("longshort-eval-report: error: the runs differ in dtype (`hf` bfloat16, `ours` float32)")
    assert "torch_dtype" in err
    assert not (tmp_path / "no").exists()
    main([str(hf), str(ours), "--out", str(tmp_path / "rep"), "--allow-mixed"])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| run | folder | model | checkpoint | dtype | device | --limit | samples per task |" in md
    assert "| hf | /ckpt/a | bfloat16 † | cpu | all |" in md
    assert "| longshort | /ckpt/a | float32 † | cpu | all |" in md
    assert "the runs differ in dtype (`hf` bfloat16, `ours` float32)" in md


def test_reasons_listed_outside_the_tables_and_a_run_without_a_curve_is_named(tmp_path):
    reason = "longshort_ppl at length 512: its requests need 512 tokens but --model hf runs at most 256"
    hf = _run(tmp_path / "hf", 20, model="hf", pretrained="/ckpt/b", reasons={reason: 1})
    ours = _run(tmp_path / "ours", 20)
    (ours / "samples_longshort_ppl_2026-01-01T00-00-00.jsonl").write_text(json.dumps({"curve_mean_nll_2": [1.0, 2.0]}))
    summary = build_report([hf, ours], tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"- `hf` / `longshort_ppl`: {reason}" in md and summary["errors"] == {"hf": {"longshort_ppl": reason}}
    assert ("No per-position loss curve for `hf`: its model (`hf`) returns one sum per request, no per-token "
            "log-probabilities" in md) and "its run also has no samples file (--log_samples)" in md
    assert "same checkpoint" not in md
    assert set(summary["per_position_mean_nll"]) == {"ours"}


def test_cells_a_limit_left_without_a_document_are_named_in_the_report(tmp_path):
    """`--limit 3` of passkey's 5 depths at one length: depths 75% and 100% never ran. The eval's closing line said so
    (the results file's `limit_left_out`); the report showed depths 0-50% only, in its tables and heatmaps, without a
    word."""
    ours = _run(tmp_path / "ours", 3, limit=3.0, name="longshort_passkey")
    data = json.loads((ours / "results_2026-01-01T00-00-00.json").read_text())
    data["configs"]["longshort_passkey"]["limit_left_out"] = ["512_d75", "512_d100"]
    (ours / "results_2026-01-01T00-00-00.json").write_text(json.dumps(data))
    hf = _run(tmp_path / "hf", 3, limit=3.0, name="longshort_passkey", model="hf")
    summary = build_report([ours, hf], tmp_path / "rep", labels=["ours", "hf"])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "`ours` / `longshort_passkey`: --limit left without a document 512_d75, 512_d100 (no value of them" in md
    assert "`hf` / `longshort_passkey`: --limit" not in md
    assert summary["limit_left_out"] == {"ours": {"longshort_passkey": ["512_d75", "512_d100"]}}


def test_hf_and_longshort_runs_of_one_folder_are_named_the_same_checkpoint(tmp_path, monkeypatch):
    # the cross-check docs/eval.md recommends (ours and hf on one checkpoint) was never named: longshort runs were
    # grouped by their fingerprint, hf runs (which record none) by their path
    ckpt = tmp_path / "run" / "step_4"
    ckpt.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    runs = [_run(tmp_path / "ours", 20, pretrained=str(ckpt)), _run(tmp_path / "hf", 20, model="hf",
                                                                    pretrained="run/step_4/"),
            _run(tmp_path / "other", 20, model="hf", pretrained=str(tmp_path / "run"))]
    data = json.loads((runs[0] / "results_2026-01-01T00-00-00.json").read_text())
    data["config"]["checkpoint_fingerprint"] = "abc"
    (runs[0] / "results_2026-01-01T00-00-00.json").write_text(json.dumps(data))
    build_report(runs, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert ("Runs `ours`, `hf` evaluate the same checkpoint folder; `hf` recorded no content fingerprint" in md
            and md.count("same checkpoint") == 1)
    # the folder rewritten between two longshort runs (other fingerprints): not the same, and hf's not told apart
    again = _run(tmp_path / "again", 20, pretrained=str(ckpt))
    data["config"]["checkpoint_fingerprint"] = "def"
    (again / "results_2026-01-01T00-00-00.json").write_text(json.dumps(data))
    build_report([runs[0], again], tmp_path / "rep2")
    assert "same checkpoint" not in (tmp_path / "rep2" / "report.md").read_text()


def test_a_run_recorded_on_cuda_where_cuda_was_not_available_is_shown_on_the_cpu(tmp_path):
    """Stock lm_eval records its --device default (cuda:0) and the hf model runs on the CPU; the run's own environment
    (lm-eval's pretty_env_info, torch's collect_env) says which."""
    for available in (False, True):
        d = _run(tmp_path / f"cuda_{available}", 3, model="hf")
        data = json.loads((d / "results_2026-01-01T00-00-00.json").read_text())
        data["config"]["device"] = "cuda:0"
        data["pretty_env_info"] = f"PyTorch version: 2.13.0\nIs CUDA available: {available}\n"
        (d / "results_2026-01-01T00-00-00.json").write_text(json.dumps(data))
        shown = build_report([d], tmp_path / f"rep_{available}")["runs"][d.name]["device"]
        assert shown == ("cuda:0" if available else "cpu (recorded as cuda:0; CUDA was not available)")


def test_a_predict_only_run_is_named_and_alone_refused(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, capsys):
    """lm-eval's ``--predict_only`` swaps every task's metrics for ``bypass``: the run has outputs, no scores. The
    report said nothing of it (exit 0, no table, no reason). Now a report of such runs alone is refused before it
    writes anything, naming the flag; beside a scored run the report names it in a note. The run is a real
    ``longshort-eval run --predict_only`` (lm-eval's own results file)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from warm_start import with_warm_start

    env = dict(os.environ, PYTHONPATH=with_warm_start(str(Path(__file__).resolve().parents[1])), TMPDIR=str(tmp_path))
    meta = '{"ppl_source": "stdlib", "ppl_num_samples": 1, "passkey_num_samples": 1, "max_seq_lengths": [128]}'
    cmd = [sys.executable, "-m", "torchtune_longshort.eval", "run", "--model", "longshort", "--model_args",
           f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}", "--device", "cpu", "--tasks",
           "longshort_ppl,longshort_passkey", "--metadata", meta, "--predict_only",
           "--output_path", str(tmp_path / "po")]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    with pytest.raises(SystemExit) as ended:
        main([str(tmp_path / "po"), "--out", str(tmp_path / "rep")])
    assert ended.value.code == 2 and not (tmp_path / "rep").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lm-eval --predict_only (tasks longshort_passkey, longshort_ppl" in err[0], err
    scored = _run(tmp_path / "scored", 5)
    build_report([scored, tmp_path / "po"], tmp_path / "both", labels=["scored", "po"], allow_mixed=True)
    md = (tmp_path / "both" / "report.md").read_text()
    assert "`po` was run with lm-eval's --predict_only (longshort_passkey, longshort_ppl)" in md
    assert "| scored | 3 |" in md and "| po | — |" in md
    assert "bypass" not in md  # lm-eval's placeholder 999 is no score


def test_a_large_value_reads_whole_in_every_report_table(tmp_path):
    # A base model's perplexity past its context ran to 1.532e+04 in the tables (and a run's seconds to 2.22e+03 in
    # Table 1's): a number with more digits before the point than the table's significant digits prints whole.
    from torchtune_longshort.plots.axes import table_number
    from torchtune_longshort.study.tables import fmt

    _write(tmp_path / "base", {"longshort_ppl": {"ppl_512,none": 9.25, "ppl_8k,none": 15321.4}})
    main([str(tmp_path / "base"), "--out", str(tmp_path / "rep")])
    assert "| base | 9.25 | 15321 |" in (tmp_path / "rep" / "report.md").read_text()
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["longshort_ppl"]["ppl"]["base"]["8k"] == 15321.4
    for v in (15321.4, -15321.6, 9999.7, 2.5e11):  # the reference: the number rounded to a whole
        assert "e" not in table_number(v) and float(table_number(v)) == round(v)
    assert table_number(2220.0, 3) == "2220" and table_number(412.63) == "412.6" and table_number(0.12345) == "0.1235"
    assert fmt(15321.4) == "15321" and fmt(1e20) == "1e+20" and fmt(None) == "—"
    # a small one reads as in the study's tables too (4 significant digits), not with 3 and an exponent
    _write(tmp_path / "tiny", {"longshort_ppl": {"ppl_512,none": 0.00012345, "ppl_8k,none": 0.5}})
    main([str(tmp_path / "tiny"), "--out", str(tmp_path / "rep2")])
    assert f"| tiny | {fmt(0.00012345)} | 0.5 |" in (tmp_path / "rep2" / "report.md").read_text()
    assert fmt(0.00012345) == "0.0001234"


def test_a_report_without_a_ppl_figure_says_why(tmp_path):
    # every length NaN in every run: no ppl_vs_length.png, and report.md said nothing about it
    _write(tmp_path / "r", {"longshort_ppl": {"ppl_512,none": float("nan"), "ppl_8k,none": float("nan")}})
    main([str(tmp_path / "r"), "--out", str(tmp_path / "rep")])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert not (tmp_path / "rep" / "ppl_vs_length.png").exists()
    assert "No `ppl_vs_length.png`: no run has a finite longshort_ppl perplexity at any length" in md
    # summary.json is JSON any reader takes (jq, JavaScript): the NaN scores as null, not Python's NaN
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert "NaN" not in (tmp_path / "rep" / "summary.json").read_text() and summary["files"][0] == "report.md"


def test_without_matplotlib_the_report_says_so_in_one_line_and_writes_its_tables_and_csv(tmp_path, monkeypatch,
                                                                                          capsys):
    # an environment without matplotlib: a traceback and no report.md, summary.json or per_position_loss.csv
    import sys

    _write(tmp_path / "r", {"longshort_ppl": {"ppl_512,none": 9.0}, "longshort_passkey": {"acc_512_d0,none": 1.0}},
           {"longshort_ppl": [{"curve_mean_nll_3": [1.0, 2.0, 3.0]}]})
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
        main([str(tmp_path / "r"), "--out", str(tmp_path / "rep")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if "matplotlib" in ln]
    assert len(err) == 1 and "No figures: matplotlib cannot be imported" in err[0] and "pip install" in err[0]
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == ["per_position_loss.csv", "report.md",
                                                                      "summary.json"]
    rows = list(csv.DictReader((tmp_path / "rep" / "per_position_loss.csv").open()))
    assert [float(r["mean_nll"]) for r in rows] == [1.0, 2.0, 3.0]
    assert "No figures: matplotlib cannot be imported" in (tmp_path / "rep" / "report.md").read_text()
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["files"] == ["report.md", "summary.json", "per_position_loss.csv"]
    assert summary["longshort_ppl"]["ppl"]["r"] == {"512": 9.0}
    # matplotlib back: the rerun into the same --out draws the figures
    main([str(tmp_path / "r"), "--out", str(tmp_path / "rep")])
    assert (tmp_path / "rep" / "ppl_vs_length.png").exists() and (tmp_path / "rep" / "per_position_loss.png").exists()


def test_the_runs_table_names_a_model_setting_such_as_a_rope_override(tmp_path):
    # the base evaluated with rope=yarn,rope_factor=2 read as the plain base in the runs table (its model_args were in
    # the results file only)
    plain = _run(tmp_path / "plain", 5)
    yarn = _run(tmp_path / "yarn", 5)
    f = next(yarn.glob("results_*.json"))
    data = json.loads(f.read_text())
    data["config"]["model_args"].update(rope="yarn", rope_factor=2, dtype="float32")
    f.write_text(json.dumps(data))
    build_report([plain, yarn], tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| `yarn` | " in md and "| longshort (rope=yarn, rope_factor=2) | /ckpt/a |" in md
    assert "| longshort | /ckpt/a |" in md  # the plain run: no setting to name (dtype has its own column)
    # what a longshort results config records as the model resolved it (max_length, truncation, model_dtype): one
    # run with the values it spelled, not settings given (every run read "longshort (max_length=..., truncation=...)")
    for run in (plain, yarn):
        f = next(run.glob("results_*.json"))
        data = json.loads(f.read_text())
        data["config"].update(max_length=1024, truncation="none", model_dtype="torch.float32")
        f.write_text(json.dumps(data))
    build_report([plain, yarn], tmp_path / "rep2")
    md = (tmp_path / "rep2" / "report.md").read_text()
    assert "| longshort (rope=yarn, rope_factor=2) | /ckpt/a |" in md and "| longshort | /ckpt/a |" in md, md
