"""The Table-1 experiment (``python -m torchtune_longshort.study.table1``): training-free RoPE variants of one model,
misalignment (Eq. 4) against perplexity and passkey, Spearman's rho per length.

- The analysis against an independent reference: scipy's spearmanr on the same numbers, the Fisher-z interval by
  its formula, the permutation p by brute-force enumeration; verdicts of planted effects; the report built from
  those records (cells not run and failed named, the figure written).
- Bad input refused in one line before anything is written, and the cells run on a tiny checkpoint:
  test_study_table1_cells.py.
- The ``--quick`` run on the real SmolLM2 (slow): every cell through lm-eval, the results, the figure, and a rerun
  that skips every finished cell.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats
from plot_helpers import check_every_point_visible, draw, drawn_ticklabels, inside_figure, no_overlap
from test_study_stats import _brute_force_p

from torchtune_longshort.eval.tasks.common.lengths import per_length
from torchtune_longshort.study.table1.analysis import analyze, main_correlation, rho_text
from torchtune_longshort.study.table1.config import Table1Config
from torchtune_longshort.study.table1.runner import cell_key
from torchtune_longshort.config.fields import build_section

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/study/table1_smollm2.yaml"
PROG = "python -m torchtune_longshort.study.table1"
NAMES = ["base", "pi", "ntk", "dyn", "yarn", "llama3", "parts", "abf"]
SCE = [5.0, 5.3, 5.1, 6.0, 7.5, 5.6, 8.0, 6.4]
PPL = [10.0, 12.0, 11.5, 15.0, 30.0, 11.0, 40.0, 16.0]  # follows SCE, one pair swapped: the claim's direction
ACC = [0.0, 0.2, 0.1, 0.6, 0.9, 0.4, 1.0, 0.8]  # rises with SCE: against the claim


def _rec(variant, n, sce, ppl, acc, status="ok"):
    rec = {"key": cell_key(variant, n), "variant": variant, "length": n, "method": "linear", "status": status}
    if status == "ok":
        rec["results"] = {"longshort_misalignment": {per_length("sce", n): sce, per_length("jeffreys", n): sce / 50},
                          "longshort_ppl": {per_length("ppl", n): ppl},
                          "longshort_passkey": {per_length("acc", n): acc, per_length("digits", n): 1.0}}
    elif status == "failed":
        rec["error"] = "eval: lm-eval exited with 1: RuntimeError: planted"
    return rec


def _records():
    """8 variants at 384 tokens (planted: ppl with the claim, passkey against it, digits constant); at 512 three
    ok, one failed, four not run."""
    recs = {cell_key(v, 384): _rec(v, 384, x, p, a) for v, x, p, a in zip(NAMES, SCE, PPL, ACC)}
    for i, v in enumerate(NAMES):
        status = "ok" if i < 3 else "failed" if i == 3 else "not run"
        recs[cell_key(v, 512)] = _rec(v, 512, SCE[i], PPL[i], ACC[i], status)
    return recs


def _cfg(tmp_path, folder):
    return build_section(Table1Config, {
        "name": "planted", "checkpoint_dir": str(folder), "L0": 256, "lengths": [384, 512], "quick": True,
        "variants": {v: {"method": "linear"} for v in NAMES}, "output_dir": str(tmp_path / "out")})


def test_rho_interval_p_and_verdicts_against_scipy_and_brute_force():
    a = analyze(_records(), [384, 512])
    at = a["per_length"]["384"]
    ppl, acc, digits = (main_correlation(at, t) for t in ("ppl", "passkey", "passkey_digits"))
    rho = stats.spearmanr(SCE, PPL).statistic
    assert ppl["n"] == 8 and ppl["spearman"] == pytest.approx(rho)
    z, half = math.atanh(rho), stats.norm.ppf(0.975) * math.sqrt(1.06 / 5)
    assert (ppl["spearman_lo"], ppl["spearman_hi"]) == (pytest.approx(math.tanh(z - half)),
                                                      pytest.approx(math.tanh(z + half)))
    assert ppl["p_permutation"] == pytest.approx(_brute_force_p(SCE, PPL))
    assert ppl["verdict"] == "held" and "strong rho +" in ppl["why"]
    assert acc["spearman"] == pytest.approx(stats.spearmanr(SCE, ACC).statistic) and acc["verdict"] == "contradicted"
    assert digits["verdict"] == "not measurable" and "no ranking" in digits["why"]  # 1.0 for every variant
    jeff = next(c for c in at["correlations"] if c["predictor"] == "jeffreys" and c["target"] == "ppl")
    assert jeff["spearman"] == pytest.approx(rho)  # the planted Jeffreys part is SCE / 50: the same ranks
    ent = next(c for c in at["correlations"] if c["predictor"] == "entropy" and c["target"] == "ppl")
    ref = next(line for line in a["headline"]["lines"] if line.startswith("for reference, perplexity at 384 "))
    assert ref == (f"for reference, perplexity at 384 against the metric's Jeffreys part (SCE minus the entropies): "
                   f"rho {rho_text(jeff)}, p {jeff['p_permutation']:.2g}; against the next-token entropy: "
                   f"rho {rho_text(ent)}, p {ent['p_permutation']:.2g}")  # each with its interval and p
    assert "[" in rho_text(ent) and "reference: next-token" not in ref
    at512 = a["per_length"]["512"]
    assert [r["status"] for r in at512["rows"]] == ["ok"] * 3 + ["failed"] + ["not run"] * 4
    assert main_correlation(at512, "ppl")["verdict"] == "not measurable"  # 3 variants: no interval
    assert a["headline"]["verdict"] == "does not hold"  # passkey contradicts the claim at 384


def test_perfect_ranking_has_no_interval_and_is_judged_by_the_exact_p():
    recs = {cell_key(v, 384): _rec(v, 384, x, x * 3, 1.0 - x / 10) for v, x in zip(NAMES, SCE)}
    c = main_correlation(analyze(recs, [384])["per_length"]["384"], "ppl")
    assert c["spearman"] == pytest.approx(1.0) and c["spearman_lo"] is None  # Fisher's z is infinite at |rho| = 1
    assert c["p_permutation"] == pytest.approx(2 / math.factorial(8))  # the two orderings with |rho| = 1
    assert c["verdict"] == "held" and "exact p" in c["why"]


def test_an_interval_the_exact_p_does_not_confirm_is_not_significant():
    """n = 5, one neighbour pair swapped: rho = 0.9, whose Fisher-z interval (se sqrt(1.06 / 2)) excludes 0 while
    the exact permutation p over the 120 pairings is 10 / 120 = 0.083. The verdict said `held` beside p 0.083."""
    sce, ppl = [5.0, 5.1, 5.3, 6.0, 7.5], [11.0, 10.0, 12.0, 15.0, 30.0]
    recs = {cell_key(v, 384): _rec(v, 384, x, y, 1.0) for v, x, y in zip(NAMES, sce, ppl)}
    c = main_correlation(analyze(recs, [384])["per_length"]["384"], "ppl")
    z, half = math.atanh(0.9), stats.norm.ppf(0.975) * math.sqrt(1.06 / 2)
    assert c["spearman"] == pytest.approx(stats.spearmanr(sce, ppl).statistic) == pytest.approx(0.9)
    assert c["spearman_lo"] == pytest.approx(math.tanh(z - half)) and c["spearman_lo"] > 0
    assert c["p_permutation"] == pytest.approx(_brute_force_p(sce, ppl)) == pytest.approx(10 / 120)
    assert c["verdict"] == "same direction, not significant", c
    assert "permutation p = 0.0833 is not below 0.05" in c["why"]


def test_report_reads_as_the_answer_and_names_missing_cells(tmp_path, tiny_llama2_dir):
    from torchtune_longshort.study.table1.report import build_table1_report

    cfg = _cfg(tmp_path, tiny_llama2_dir)
    summary = build_table1_report(cfg, _records(), tmp_path / "report", command="cmd")
    md = (tmp_path / "report/report.md").read_text().splitlines()
    assert md[0].startswith("# Table 1") and md[2].startswith("**Verdict: the paper's claim (misalignment predicts "
                                                             "length generalization) does not hold on this model**")
    text = "\n".join(md)
    assert "| dyn | linear | failed |" in text and "| yarn | linear | not run |" in text
    assert "Failed cells: dyn: eval: lm-eval exited with 1: RuntimeError: planted" in text
    rows = list(csv.DictReader(open(tmp_path / "report/results.csv")))
    assert len(rows) == 16 and [float(r["ppl"]) for r in rows[:8]] == PPL
    assert summary["analysis"]["headline"]["verdict"] == "does not hold"
    assert (tmp_path / "report/metric_vs_performance.png").stat().st_size > 10_000
    from torchtune_longshort.study.table1.figure import figure

    fig = draw(figure(cfg, summary["analysis"]))
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == 6 and sum("no point: failed: dyn; not run: yarn, llama3, parts, abf" in " ".join(
        t.split()) for t in titles) == 3  # the 512 column: each panel names the variants without a point
    # one key under the panels names every variant with a point, by its own marker; no name is printed among the
    # points (they ran into each other where variants cluster), and no text runs into another or off the page
    (key,) = fig.legends
    assert [t.get_text() for t in key.get_texts()] == NAMES
    assert not any(n in t.get_text() for ax in fig.axes for t in ax.texts for n in NAMES)
    assert len({(h.get_paths()[0].vertices.tobytes(), tuple(h.get_edgecolor()[0])) for h in key.legend_handles}) == 8
    words = key.get_texts() + [t for ax in fig.axes for t in drawn_ticklabels(ax.xaxis) + drawn_ticklabels(ax.yaxis)
                               + [ax.title, ax.xaxis.label, ax.yaxis.label] + ax.texts]
    no_overlap(words, fig.canvas.get_renderer())
    for t in words:
        if t.get_text():
            inside_figure(fig, t)
    assert sorted(p.name for p in (tmp_path / "report/cells").iterdir()) == sorted(
        k for k, r in _records().items() if r["status"] != "not run")


def test_variants_that_cluster_keep_every_marker_visible(tmp_path, tiny_llama2_dir):
    """Three variants 0.025 apart in SCE at one passkey score (the committed 12k cells of ntk, yarn and ntk_by_parts:
    4.673, 4.655, 4.680, all 1.0) on an axis some units wide: filled markers hid ntk's triangle under yarn's, 7
    markers for n = 8. Open markers overlay without hiding one another."""
    from torchtune_longshort.study.table1.figure import figure

    sce = [7.56, 7.42, 4.673, 4.462, 4.655, 4.391, 4.680, 5.676]
    acc = [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    recs = {cell_key(v, 384): _rec(v, 384, x, 4.4, a) for v, x, a in zip(NAMES, sce, acc)}
    fig = draw(figure(_cfg(tmp_path, tiny_llama2_dir), analyze(recs, [384])))
    assert [check_every_point_visible(ax, fig) for ax in fig.axes] == [8, 8, 8]
    # at the figure's size the three still make one blot: each panel's title names them (ppl 4.4 and digits 1.0 for
    # all: there dyn and llama3, 0.07 apart in SCE, make a second; passkey 0 for llama3 parts it from dyn)
    titles = [" ".join(ax.get_title().split()) for ax in fig.axes]
    assert titles[1].endswith("on one spot: ntk, yarn, parts"), titles
    assert titles[0].endswith("on one spot: dyn, llama3; ntk, yarn, parts") and titles[2].endswith(titles[0][-29:])


def test_the_key_of_a_one_length_figure_lies_inside_it(tmp_path, tiny_llama2_dir):
    """One length (one column of panels) and the shipped config's 8 variant names: the key, in one row of 8, ran
    off both sides of the page (the 12k report of 2026-12-07 showed "pi" to "ntk_by"). Every name lies inside the
    figure, by matplotlib's own extents, and no two overlap."""
    from torchtune_longshort.study.table1.config import load_table1_config
    from torchtune_longshort.study.table1.figure import figure

    names = list(load_table1_config(str(CONFIG)).variants)
    assert len(names) == 8 and "ntk_by_parts" in names
    cfg = build_section(Table1Config, {
        "name": "planted", "checkpoint_dir": str(tiny_llama2_dir), "L0": 256, "lengths": [384],
        "variants": {v: {"method": "linear"} for v in names}, "output_dir": str(tmp_path / "out")})
    recs = {cell_key(v, 384): _rec(v, 384, x, p, a) for v, x, p, a in zip(names, SCE, PPL, ACC)}
    fig = draw(figure(cfg, analyze(recs, [384])))
    (key,) = fig.legends
    assert [t.get_text() for t in key.get_texts()] == names
    no_overlap(key.get_texts(), fig.canvas.get_renderer())
    for t in key.get_texts():
        inside_figure(fig, t)


@pytest.mark.slow
def test_quick_run_on_the_real_model_then_a_rerun_skips_every_cell(tmp_path, real_model_dir):
    """``--quick`` as shipped: SmolLM2 (L0 64 pretended) under 4 RoPE variants at 96 tokens, each cell a
    ``longshort-eval`` run of the pack's ppl, passkey and misalignment tasks; the report's rho equals scipy's on its
    own results.csv; a second invocation runs no cell and rewrites the same numbers."""
    out, rep = tmp_path / "out", tmp_path / "report"
    cmd = [sys.executable, "-m", "torchtune_longshort.study.table1", "--config", str(CONFIG), "--quick",
           "--out", str(out), "--report-dir", str(rep), "--repo-root", str(ROOT)]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads((rep / "summary.json").read_text())
    keys = ["base_96", "pi_96", "ntk_96", "yarn_96"]
    assert {k: c["status"] for k, c in summary["cells"].items()} == dict.fromkeys(keys, "ok")
    rows = list(csv.DictReader(open(rep / "results.csv")))
    sce, ppl = [float(r["sce"]) for r in rows], [float(r["ppl"]) for r in rows]
    assert all(x > 0 for x in sce) and all(1 < y < 1000 for y in ppl), rows
    assert all(0 <= float(r["jeffreys"]) < float(r["sce"]) for r in rows)  # SCE = Jeffreys + both entropies
    assert all(0 <= float(r["passkey"]) <= 1 for r in rows)
    c = main_correlation(summary["analysis"]["per_length"]["96"], "ppl")
    assert c["n"] == 4 and c["spearman"] == pytest.approx(stats.spearmanr(sce, ppl).statistic)
    assert c["p_permutation"] == pytest.approx(_brute_force_p(sce, ppl))
    for k in keys:  # each cell ran its own lm-eval with the variant's RoPE at the cell's length
        rec = json.loads((out / "cells" / k / "result.json").read_text())
        assert rec["spec"]["rope"]["original_max_seq_len"] == 64 and rec["spec"]["length"] == 96
        assert f"rope={rec['spec']['rope']['method']},rope_original_max_seq_len=64,max_length=96" in (
            out / "cells" / k / "eval.log").read_text()
    assert (rep / "metric_vs_performance.png").stat().st_size > 10_000
    assert "quick variant" in (rep / "report.md").read_text()
    before = {k: (out / "cells" / k / "result.json").stat().st_mtime_ns for k in keys}
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "4 cells (4 variants x 1 length), 4 done before, 0 to run" in again.stdout
    assert all(f"{k}: result.json present (ok), skipped" in again.stdout for k in keys)
    assert {k: (out / "cells" / k / "result.json").stat().st_mtime_ns for k in keys} == before
    assert list(csv.DictReader(open(rep / "results.csv"))) == rows


def test_rebuild_script_keeps_a_table1_note_and_writes_its_results_csv(tmp_path):
    """benchmarks/rebuild_study_reports.py --write: before, a Table-1 folder's hand-written note (under the verdict)
    was passed to no rebuild (lost), and only report.md, summary.json and PNGs were copied (results.csv went stale).
    Now the note is read from where --note puts it, and every file the rebuild wrote at its top is copied; a figure
    the committed summary.json named that the rebuild no longer draws is removed, the records stay."""
    from benchmarks.rebuild_study_reports import note_in, write_back

    committed = (ROOT / "docs/study/table1_smollm2/report.md").read_text()
    note = note_in(committed, table1=True)
    assert note.startswith("2026-11-27, this project's 2-core CPU") and "\n" not in note
    assert not note_in(committed.replace(note, ""), table1=True)  # a report without one: none
    study = note_in("# Study `x`\n\nConfig: `configs/study/x.yaml`.\n\n> hand-written\n\nEvaluation settings: these "
                    "runs used `max_length: 512`; the config now says `max_length: 1024`. The tables ...\n\n## The answer\n")
    assert study == "> hand-written"  # the runs' settings line is the builder's: a rebuild must not add it twice
    rebuilt, dest = tmp_path / "rebuilt", tmp_path / "dest"
    for d, names in ((rebuilt, ["report.md", "summary.json", "results.csv", "fig.png"]),
                     (dest, ["report.md", "results.csv", "fig.png", "gone.png", "by_hand.png", "cells/c/result.json"])):
        for n in names:
            (d / n).parent.mkdir(parents=True, exist_ok=True)
            (d / n).write_text(f"{d.name} {n}")
    (dest / "summary.json").write_text(json.dumps({"plots": ["fig.png", "gone.png"], "figure": "fig.png"}))
    copied, removed = write_back(rebuilt, dest)
    assert copied == ["fig.png", "report.md", "results.csv", "summary.json"] and removed == ["gone.png"]
    assert all((dest / n).read_text() == f"rebuilt {n}" for n in copied)
    assert (dest / "by_hand.png").is_file() and (dest / "cells/c/result.json").read_text() == "dest cells/c/result.json"


@pytest.mark.parametrize("same_as_out", [False, True])
def test_a_report_that_fails_part_way_leaves_its_folder_as_it_was_and_the_next_one_runs(
        tmp_path, tiny_llama2_dir, monkeypatch, same_as_out):
    """The report writes the cells' copies and results.csv, then draws the figure: a figure that failed (a full disk,
    a Ctrl-C) left those files, and the next report into the folder was refused for them ("holds 'results.csv', which
    no earlier run there wrote"). Now a failed report takes back what it added (a report folder that is the cells'
    own --out keeps its cell records), and the same command then runs."""
    from torchtune_longshort.study.table1 import report
    from torchtune_longshort.study.table1.runner import RESULT

    cfg = _cfg(tmp_path, tiny_llama2_dir)
    recs = {k: {**r, "spec": {"method": r["method"]}} for k, r in _records().items()}  # as the runner records them
    rdir = tmp_path / "out"
    if same_as_out:  # the cells' records, as the runner leaves them
        for key, rec in recs.items():
            if rec.get("status") != "not run":
                (rdir / "cells" / key).mkdir(parents=True)
                (rdir / "cells" / key / RESULT).write_text(json.dumps(rec))
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))

    def no_room(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(report, "save_figure", no_room)
        with pytest.raises(OSError):
            report.build_table1_report(cfg, recs, rdir, command="cmd")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
    report.check_table1_report_dir(rdir)  # refused before: results.csv and the cells' copies were left
    report.build_table1_report(cfg, recs, rdir, command="cmd")
    assert (rdir / "report.md").is_file() and (rdir / report.FIGURE).is_file()
