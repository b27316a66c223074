"""What a Table-1 cell keeps besides its values, and what the report says of it: lm-eval's standard error of each
value (against the closed form over the cell's own samples), the samples evaluated, and the count and reason of what
could not be scored; a record written before these were kept reads ``not recorded``, with the command that records
them.

One cell runs the real eval CLI in-process (``run_cli``: the same argv the runner builds, lm-eval's own evaluator
and results files) on the tiny checkpoint: misalignment on 3 texts (a standard error), one passkey prompt (none: one
sample) and perplexity from a text too short for the length (not scored, and why).
"""

from __future__ import annotations

import json
import math
import statistics

import yaml
from test_study_table1 import _rec

from torchtune_longshort.eval.cli_run import run_cli, samples_of
from torchtune_longshort.study.table1.analysis import analyze, main_correlation
from torchtune_longshort.study.table1.config import load_table1_config
from torchtune_longshort.study.table1.report import build_table1_report
from torchtune_longshort.study.table1.runner import Table1, cell_key

VARIANTS = ["base", "pi", "ntk", "yarn"]


def _in_process(argv, log_path, cwd, env, timeout):
    """The runner's executor, in this process: the cell's own eval command line through lm-eval's CLI."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("in process\n")
    run_cli(argv[3:])  # [python, -m, torchtune_longshort.eval, run, ...]
    return 0


def test_a_cell_keeps_lm_evals_stderr_its_samples_and_what_could_not_be_scored(tmp_path, tiny_folder):  # noqa: F811
    short = tmp_path / "short.txt"
    short.write_text("A text far too short for 256 tokens.\n")
    cfg_path = tmp_path / "table1.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "tiny", "checkpoint_dir": str(tiny_folder), "L0": 128, "lengths": [256],
        "variants": {v: {"method": "linear"} for v in VARIANTS},
        "eval": {"ppl_num_samples": 1, "mis_num_samples": 3, "passkey_num_samples": 1,
                 "metadata": {"ppl_data_files": str(short), "passkey_depths": [50]}}}))
    t1 = Table1(load_table1_config(cfg_path), output_dir=tmp_path / "out", executor=_in_process, log=lambda m: None)
    rec = t1.run_cell("pi", 256)
    assert rec["status"] == "ok", rec.get("error")
    # the standard error lm-eval wrote, and the closed form sd / sqrt(n) over the cell's own per-text values
    sce = [r["sce_256"] for r in samples_of(t1.cell_dir("pi", 256) / "eval", "longshort_misalignment")]
    (results_file,) = (t1.cell_dir("pi", 256) / "eval").rglob("results_*.json")
    lm_eval_se = json.loads(results_file.read_text())["results"]["longshort_misalignment"]["sce_256_stderr,none"]
    assert len(sce) == 3 and lm_eval_se > 0
    se = rec["stderr"]["longshort_misalignment"]["sce_256"]
    assert se == lm_eval_se and math.isclose(se, statistics.stdev(sce) / math.sqrt(3), rel_tol=1e-9)
    assert rec["samples"] == {"longshort_ppl": 1, "longshort_passkey": 1, "longshort_misalignment": 3}
    (reason, n), = rec["not_scored_counts"]["longshort_ppl"]["samples"].items()
    assert n == 1 and "sequences of length=256 tokens could be cut" in reason
    assert "longshort_misalignment" not in rec["not_scored_counts"]

    # the report: each value's standard error or why it has none; the cell not scored says why and of how many
    old = {k: v for k, v in rec.items() if k not in ("stderr", "samples", "not_scored_counts")}
    recs = {cell_key("pi", 256): rec, cell_key("base", 256): {**old, "variant": "base", "key": "base_256"},
            cell_key("ntk", 256): {**rec, "variant": "ntk", "key": "ntk_256"},
            cell_key("yarn", 256): {"key": "yarn_256", "variant": "yarn", "length": 256, "status": "not run"}}
    rows = {r["variant"]: r for r in analyze(recs, [256])["per_length"]["256"]["rows"]}
    assert rows["pi"]["stderr"]["sce"] == se and rows["pi"]["stderr_why"]["passkey"] == "none: one sample"
    assert rows["pi"]["stderr_why"]["entropy"].startswith("none: derived from SCE and Jeffreys")
    assert rows["pi"]["why"]["ppl"].startswith("not scored (1 of 1 samples): the text could not fill the length: "
                                               "0 of 1 sequences of 256 tokens")
    assert rows["base"]["stderr_why"]["sce"] == "not recorded"
    assert rows["base"]["why"]["ppl"].endswith("(count not recorded)")
    assert rows["yarn"]["why"]["sce"] == "not run" and "sce" not in rows["pi"]["why"]
    c = main_correlation(analyze(recs, [256])["per_length"]["256"], "ppl")
    assert c["n"] == 0 and set(c["left_out"]) == set(VARIANTS) and c["left_out"]["yarn"] == "sce: not run; ppl: not run"
    build_table1_report(t1.cfg, recs, tmp_path / "report", command="cmd")
    md = (tmp_path / "report/report.md").read_text()
    pi_row = next(line for line in md.splitlines() if line.startswith("| pi | linear |"))
    assert "not scored (1 of 1 samples): the text could not fill the length" in pi_row
    se_rows = [line for line in md.splitlines() if line.startswith("| pi |") and line is not pi_row]
    assert any(f"| {se:.2g} |" in line and "none: one sample" in line for line in se_rows), se_rows
    assert any(line.startswith("| base |") and "not recorded" in line for line in md.splitlines())
    csv_text = (tmp_path / "report/results.csv").read_text()
    assert "sce_se" in csv_text.splitlines()[0] and repr(se)[:8] in csv_text


def test_cells_that_recorded_no_stderr_say_not_recorded_and_name_the_command(tmp_path, tiny_llama2_dir):
    """The committed Table-1 cells (2026-11-27) predate the fields: the report says so in one line per length, with
    the command that records them, instead of a table of "not recorded"."""
    from torchtune_longshort.config.fields import build_section
    from torchtune_longshort.study.table1.config import Table1Config

    names = ["base", "pi", "ntk", "dyn"]
    recs = {cell_key(v, 384): _rec(v, 384, 5.0 + i, 10.0 + i, 1.0) for i, v in enumerate(names)}
    cfg = build_section(Table1Config, {"name": "old", "checkpoint_dir": str(tiny_llama2_dir), "L0": 256,
                                       "lengths": [384], "variants": {v: {"method": "linear"} for v in names}})
    build_table1_report(cfg, recs, tmp_path / "report", command="python -m torchtune_longshort.study.table1 --config c")
    md = (tmp_path / "report/report.md").read_text()
    assert ("Standard errors and not-scored counts at 384: not recorded (these cells' result.json were written before "
            "the runner kept") in md
    assert ("`python -m torchtune_longshort.study.table1 --config c --out <a new folder> --report-dir <this folder>` "
            "evaluates every cell again and records them") in md
    assert "| base | linear | 5 | 0.1 | 2.45 | 10 | 1 | 1 |" in md  # every value scored: the numbers alone
