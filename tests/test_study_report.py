"""The study report against its sources: its tables equal the result.json files they link to (parsed back
independently of the report's code), provenance in every file, the paired outcome, BABILong headings and partial
scores. Runs come from the fake executor of study_helpers (no training)."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.report import build_report
from plot_helpers import assert_png_drawn
from study_helpers import ROOT, CPU_SMALL, FakeExecutor, _study


# ---------------------------------------------------------------- report against its sources
def _parse_tables(md: str):
    """Markdown tables -> list of (heading path, header, rows), parsed without the report's code."""
    out, heads, lines = [], [], md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            heads = heads[: level - 1] + [line.lstrip("# ").strip()]
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in line.strip("|").split(" | ")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("| "):
                rows.append([c.strip() for c in lines[i].strip()[2:-2].split(" | ")])
                i += 1
            out.append((list(heads), header, rows))
            continue
        i += 1
    return out


def _failed_run_recorded_then_tried_again(study, recs, summary, md):
    """A failed fine-tune is recorded, the grid goes on and the report says so; a second invocation runs only it."""
    assert recs["yarn_a0.1_s0"]["status"] == "failed" and recs["yarn_a0.1_s0"]["stage"] == "train"
    assert "FloatingPointError: non-finite loss nan" in recs["yarn_a0.1_s0"]["error"]
    ok = [k for k, r in recs.items() if r["status"] == "ok"]
    assert len(ok) == 18  # base + 17 of 18 fine-tunes (3 methods x 3 alphas x 2 seeds)
    assert re.search(r"\| yarn_a0\.1_s0 \| failed \|.*FloatingPointError: non-finite loss nan", md)
    assert summary["runs"]["yarn_a0.1_s0"]["status"] == "failed"
    # per checkpoint: entropy = (SCE - Jeffreys) / 2 of the fake lm-eval's values at L (alpha 0.3, seed 0)
    L = study.cfg.L
    row = next(x for x in md.splitlines() if x.startswith("| pi_a0.3_s0 | ok |"))
    entropy = float(row.split("|")[5])
    assert math.isclose(entropy, ((5.0 - 0.3 + L / 1000) - (0.5 - 0.3 / 2)) / 2, rel_tol=1e-3)
    wall = md[md.index("## Wall time"):]
    assert "- fine-tunes: 17 ok," in wall and "1 fine-tune at once" in wall  # the failed run is not averaged
    # Second invocation: the ok runs are skipped (no subprocess), the failed one is tried again and now passes.
    ex2 = FakeExecutor()
    study.executor = ex2
    recs2 = study.run()
    trained = [Path(a[a.index("--config") + 1]).parent.name for a in ex2.calls if Path(a[0]).name == "tune"]
    assert trained == ["yarn_a0.1_s0"]
    assert all(r["status"] == "ok" for r in recs2.values())


def test_report_tables_equal_the_json_they_link_to_and_the_outcome_is_paired_by_seed(tmp_path):
    study, _ = _study(tmp_path, fail={"yarn_a0.1_s0"})
    records = study.run()
    rdir = tmp_path / "report"
    s = build_report(study.out, rdir, study.cfg)
    # the outcome, paired by seed. fake: sce = 5 - alpha + 0.11 seed + n/1000 -> paired difference exactly -alpha,
    # sd 0, both seeds lower; ppl = 10 + n/100 - 2 alpha + 0.37 seed: yarn alpha 0.1 has only seed 1 (seed 0 failed),
    # paired with the baseline's seed 1 -> -0.2 (paired with seed 0 it would be +0.17)
    d = s["outcome"]["misalignment"]["pi"]["0.3"]["256"]
    assert math.isclose(d["mean_diff"], -0.3, abs_tol=1e-9) and d["sd_diff"] < 1e-9
    assert (d["n_lower"], d["n_pairs"]) == (2, 2)
    p = s["outcome"]["ppl"]["yarn"]["0.1"]["1k"]
    assert math.isclose(p["mean_diff"], -0.2, abs_tol=1e-9)
    md = (rdir / "report.md").read_text()
    metric_of = {"Perplexity": ("longshort_ppl", "ppl"), "Misalignment metric, Eq. 4 (SCE": ("longshort_misalignment", "sce"),
                 "Misalignment metric, Eq. 4, Jeffreys": ("longshort_misalignment", "jeffreys"), "Passkey retrieval": ("longshort_passkey", "acc"),
                 "Passkey digits": ("longshort_passkey", "digits")}
    checked, families = 0, set()
    for heads, header, rows in _parse_tables(md):
        fam = next((v for k, v in metric_of.items() if heads and heads[1].startswith(k)), None) if len(heads) > 1 else None
        if fam is None:
            continue
        families.add(fam)
        assert header[0] == "loss" and header[-1] == "runs"
        assert rows[0][0] == "CE (alpha = 0)"  # baseline row first
        for row in rows:
            links = re.findall(r"\]\((runs/[^)]+/result\.json)\)", row[-1])
            recs = [json.loads((rdir / l).read_text()) for l in links]
            recs = [r for r in recs if r["status"] == "ok"]
            for col, text in zip(header[1:-1], row[1:-1]):
                vals = [r["results"][fam[0]][f"{fam[1]}_{col}"] for r in recs]
                if not vals:
                    assert text == "—"
                    continue
                m = re.fullmatch(r"(.*?)(?: \((\d+)/(\d+) runs; [^)]*\))?", text)  # a cell missing a run says so
                assert (int(m[2]), int(m[3])) == (len(vals), len(links)) if m[2] else len(vals) == len(links), text
                se = re.search(r" \(se ([^)]*)\)$", m[1])  # lm-eval's standard error of a one-run cell
                assert not se or len(vals) == 1, text  # never beside a ± over seeds
                parts = m[1][:se.start()].split(" ± ") if se else m[1].split(" ± ")
                assert math.isclose(float(parts[0]), statistics.fmean(vals), rel_tol=1e-3), (heads, row, col)
                if len(vals) > 1:
                    assert math.isclose(float(parts[1]), statistics.stdev(vals), rel_tol=1e-3, abs_tol=1e-9)
                else:
                    assert len(parts) == 1
                checked += 1
    # 5 tables x 2 methods x 3 alpha rows x their columns, + base reference rows
    assert checked > 80 and families == set(metric_of.values())
    # the failed run is not in its row's numbers: yarn alpha 0.1 has one seed -> no ±, and the cell says so
    assert re.search(r"\| CE \+ 0\.1 x misalignment \| [0-9.]+ \(1/2 runs; 1 failed\) \| [0-9.]+ \(1/2 runs; 1 fa", md)
    # every run's raw JSON and lm-eval file sit in the report folder
    for r in study.cfg.grid:
        assert (rdir / "runs" / r.key / "result.json").is_file()
    assert (rdir / "runs" / "pi_a0_s0" / "lm_eval_results.json").is_file()
    for png in ("ppl_vs_length.png", "misalignment_vs_length.png", "babilong_depth_length.png",
                "passkey_depth_length.png", "finetune_convergence.png"):
        assert_png_drawn(rdir / png)
    _failed_run_recorded_then_tried_again(study, records, s, md)  # last: the rerun trains the failed run again


class NanPplExecutor(FakeExecutor):
    """Like FakeExecutor, and every perplexity lm-eval gives is NaN (as past a model's positions), in the results file
    as lm-eval writes it (Python's json: ``NaN``)."""

    def __call__(self, argv, log_path, cwd, env, timeout):
        rc = super().__call__(argv, log_path, cwd, env, timeout)
        if argv[1:4] == ["-m", "torchtune_longshort.eval", "run"]:
            f = next((Path(argv[argv.index("--output_path") + 1]) / "model").glob("results_*.json"))
            data = json.loads(f.read_text())
            for k in list(data["results"].get("longshort_ppl", {})):
                data["results"]["longshort_ppl"][k] = float("nan")
            f.write_text(json.dumps(data))
        return rc


def _strict(path: Path):
    """``path`` parsed as JSON as jq or JavaScript would: NaN / Infinity refused."""
    def refuse(name):
        raise AssertionError(f"{path} holds {name}, which is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_provenance_in_every_file_the_study_writes_and_each_is_strict_json(tmp_path):
    import torch

    study, _ = _study(tmp_path)
    study.executor = NanPplExecutor()  # every perplexity NaN: written as null, which any JSON reader takes
    study.run(only=["pi_a0_s0"])
    rec = _strict(study.run_dir("pi_a0_s0") / "result.json")
    assert rec["results"]["longshort_ppl"] and set(rec["results"]["longshort_ppl"].values()) == {None}
    _strict(study.out / "study.json")
    assert rec["provenance"]["packages"]["torch"] == torch.__version__
    # cpu_small trains and evaluates on the stdlib corpus: its content hash is recorded
    assert len(rec["provenance"]["stdlib_corpus"]["sha256"]) == 64
    assert json.loads((study.out / "study.json").read_text())["provenance"] == rec["provenance"]
    summary = build_report(study.out, tmp_path / "report", study.cfg)
    assert summary["provenance"]["stdlib_corpus"] == rec["provenance"]["stdlib_corpus"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Provenance" in md and f"torch {torch.__version__}" in md
    assert rec["provenance"]["stdlib_corpus"]["sha256"][:16] in md
    for f in [tmp_path / "report" / "summary.json", *(tmp_path / "report" / "runs").glob("*/result.json")]:
        _strict(f)
    assert not re.search(r"\|\s*nan\s*\|", md, re.I) and "| — |" in md  # a missing perplexity is a dash, as NaN was


def test_a_curve_written_with_null_for_nan_is_read_back_as_nan():
    from torchtune_longshort.study.records import curve_mean, upgraded

    rec = {"curves": {"64": [1.0, None, 3.0], "8": [1.0, 3.0]}, "train": {"val_ce": [[5, 2.0], [10, None]]}}
    up = upgraded(rec)
    assert math.isnan(curve_mean(up, 64, 0, 3)) and curve_mean(up, 8, 0, 2) == 2.0
    assert up["train"]["val_ce"][0] == [5, 2.0] and math.isnan(up["train"]["val_ce"][1][1])
    assert rec["curves"]["64"][1] is None  # the record read is left as it was


class PartialBabilongExecutor(FakeExecutor):
    """Like FakeExecutor, and lm-eval's group bookkeeping for longshort_babilong: only ``with_data`` of its five QA
    tasks report scores, the others only missing_data (as when the generator made fewer QA tasks)."""

    def __init__(self, with_data):
        super().__init__()
        self.with_data = with_data

    def __call__(self, argv, log_path, cwd, env, timeout):
        rc = super().__call__(argv, log_path, cwd, env, timeout)
        if argv[1:4] == ["-m", "torchtune_longshort.eval", "run"]:
            f = next((Path(argv[argv.index("--output_path") + 1]) / "model").glob("results_*.json"))
            data = json.loads(f.read_text())
            asked = argv[argv.index("--tasks") + 1].split(",")
            group = "longshort_babilong" in asked  # the group runs its five tasks; else the tasks asked run alone
            qas = [f"longshort_babilong_qa{i}" for i in range(1, 6)] if group else [
                t for t in asked if t.startswith("longshort_babilong_qa")]
            for t in qas:
                data["results"][t] = ({"acc,none": 0.5, "acc_1k,none": 0.5} if t in self.with_data
                                      else {"missing_data,none": 1.0})
            if group:
                data["group_subtasks"] = {"longshort_babilong": qas}
            f.write_text(json.dumps(data))
        return rc


@pytest.mark.parametrize("qa, with_data, heading, mark", [
    ("qa1,qa2,qa3,qa4,qa5", ["longshort_babilong_qa1"], "## BABILong QA1-QA5 accuracy", " (1/5 tasks)"),
    ("qa1,qa2,qa3,qa4,qa5", [f"longshort_babilong_qa{i}" for i in range(1, 6)], "## BABILong QA1-QA5 accuracy", None),
    ("qa1", ["longshort_babilong_qa1"], "## BABILong QA1 accuracy", None),
])
def test_babilong_heading_says_what_was_run_and_partial_scores_are_marked(tmp_path, qa, with_data, heading, mark):
    raw = yaml.safe_load(CPU_SMALL.read_text())
    raw["eval"]["babilong"]["qa"] = qa
    raw["methods"], raw["seeds"] = {"pi": {"method": "linear"}}, [0]
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(raw))
    cfg = load_study_config(p, repo_root=ROOT)
    study = Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=PartialBabilongExecutor(with_data),
                  log=lambda m: None)
    study.run()
    rec = json.loads((study.run_dir("pi_a0_s0") / "result.json").read_text())
    cov = rec["coverage"]["longshort_babilong"]["acc"]
    assert cov["present"] == with_data and cov["total"] == len(qa.split(","))  # the tasks asked, no more
    summary = build_report(study.out, tmp_path / "report", cfg)
    md = (tmp_path / "report" / "report.md").read_text()
    assert heading in md
    assert "not comparable with published BABILong results" in md
    section = md.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| CE")]
    assert rows
    cell = summary["tables"]["babilong"]["methods"]["pi"][0]["cells"]["all"]
    if mark:
        assert all(mark in row for row in rows)
        assert cell["partial_group"]["missing"] == ["longshort_babilong_qa2", "longshort_babilong_qa3", "longshort_babilong_qa4", "longshort_babilong_qa5"]
        assert "no value from longshort_babilong_qa2, longshort_babilong_qa3, longshort_babilong_qa4, longshort_babilong_qa5" in section
    else:
        assert "tasks)" not in " ".join(rows) and "partial_group" not in cell


def test_only_the_babilong_tasks_asked_are_evaluated_and_their_mean_is_the_score(tmp_path):
    """``qa: qa1,qa3`` runs lm-eval on those two tasks, not the five-task group (whose other three have no data,
    each a 'data file not found' note); the run's group numbers are the unweighted mean of the two, as the group
    aggregates (weight_by_size: false), recomputed here from the fake's per-task formula."""
    study, ex = _study(tmp_path, methods={"pi": {"method": "linear"}}, seeds=[1],
                       eval={**yaml.safe_load(CPU_SMALL.read_text())["eval"],
                             "babilong": {"lengths": ["1k"], "depths": [0, 50, 100], "n": 1, "qa": "qa1,qa3"}})
    study.run()
    evals = [a for a in ex.calls if a[1:4] == ["-m", "torchtune_longshort.eval", "run"]]
    asked = ["longshort_babilong_qa1", "longshort_babilong_qa3"]
    assert evals and all(a[a.index("--tasks") + 1].split(",")[-2:] == asked for a in evals)
    assert not [a for a in evals if "longshort_babilong" in a[a.index("--tasks") + 1].split(",")]
    rec = json.loads((study.run_dir("pi_a0.3_s1") / "result.json").read_text())
    group = rec["results"]["longshort_babilong"]
    assert group["acc"] == pytest.approx(statistics.fmean([0.1 * q + 0.3 for q in (1, 3)]))
    assert group["acc_1k"] == pytest.approx(statistics.fmean([0.1 + 0.01 * q for q in (1, 3)]))
    assert group["acc_1k_d50"] == pytest.approx(statistics.fmean([0.25 + 0.001 * q for q in (1, 3)]))
    assert rec["group_subtasks"]["longshort_babilong"] == ["longshort_babilong_qa1", "longshort_babilong_qa3"]
    assert rec["coverage"]["longshort_babilong"]["acc"]["missing"] == []


def test_a_babilong_subset_gets_the_group_stderr_lm_eval_gives_and_the_table_shows_it():
    """Before, the study averaged a QA subset's tasks into the group's numbers and kept no standard error (the
    record kept none at all). Now the group's error is combined as lm-eval combines it for this group
    (weight_by_size: false): checked against lm-eval's own functions on the same numbers; a one-run cell shows it."""
    from lm_eval.api.metrics import aggregate_subtask_metrics, unweighted_mean_stderr

    from torchtune_longshort.study.run_stages import babilong_group
    from torchtune_longshort.study.tables import table_cell

    results = {"longshort_babilong_qa1": {"acc": 0.5, "acc_1k": 0.25}, "longshort_babilong_qa3": {"acc": 0.2,
                                                                                                   "acc_1k": 0.75}}
    stderrs = {"longshort_babilong_qa1": {"acc": 0.1, "acc_1k": 0.2}, "longshort_babilong_qa3": {"acc": 0.04}}
    res, groups = babilong_group(results, {}, list(results), stderrs)
    assert res["longshort_babilong"]["acc"] == pytest.approx(aggregate_subtask_metrics([0.5, 0.2], [9, 30],
                                                                                      weight_by_size=False))
    assert stderrs["longshort_babilong"]["acc"] == pytest.approx(unweighted_mean_stderr([0.1, 0.04]))
    assert "acc_1k" not in stderrs["longshort_babilong"]  # a task without one: none (lm-eval writes "N/A")
    rec = {"status": "ok", "results": res, "stderr": stderrs, "group_subtasks": groups}
    cell = table_cell({"r": rec}, ["r"], "longshort_babilong", "acc", [], "all")
    assert cell["text"] == f"0.35 (se {unweighted_mean_stderr([0.1, 0.04]):.4g})"
    assert cell["stderr"] == {"r": pytest.approx(unweighted_mean_stderr([0.1, 0.04]))}
    two = table_cell({"r": rec, "s": rec}, ["r", "s"], "longshort_babilong", "acc", [], "all")
    assert two["text"] == "0.35 ± 0"  # over seeds: the sd, as before


# ---------------------------------------------------------------- labels from what the runs recorded
def _one_method_config(tmp_path):
    raw = yaml.safe_load(CPU_SMALL.read_text())
    raw["methods"], raw["alphas"], raw["seeds"] = {"pi": {"method": "linear"}}, [0, 0.1], [0]
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(raw))
    return load_study_config(tmp_path / "study.yaml", repo_root=ROOT)


def _committed_runs(out, used, split=None, group=None):
    """A committed-style study folder ``out`` (base/, runs/<key>/result.json; no training) of
    :func:`_one_method_config`'s grid, whose runs recorded ``used`` as their ``spec.eval`` (``split``: {run key:
    another spec.eval})."""
    for key, alpha in (("base", None), ("pi_a0_s0", 0.0), ("pi_a0.1_s0", 0.1)):
        ev = (split or {}).get(key, used)
        results = {"longshort_ppl": {f"ppl_{n}": 10.0 + (alpha or 0) for n in ev["ppl_lengths"]},
                   "longshort_babilong": {f"acc_{lab}": 0.5 for lab in ev["babilong"]["lengths"]}}
        d = out / ("base" if key == "base" else f"runs/{key}")
        d.mkdir(parents=True)
        rec = {"key": key, "status": "ok", "alpha": alpha, "seed": 0, "spec": {"eval": ev}, "results": results}
        if group:  # the group's members the run scored (longshort_babilong_qa<k>)
            rec["group_subtasks"] = {"longshort_babilong": group}
            rec["coverage"] = {"longshort_babilong": {f"acc_{lab}": {"present": group[:1], "missing": group[1:],
                                                                     "total": len(group)}
                                                      for lab in ev["babilong"]["lengths"]}}
        (d / "result.json").write_text(json.dumps(rec))


def test_a_rebuilt_report_is_labelled_by_the_eval_settings_its_runs_recorded(tmp_path):
    """Before, a report rebuilt from committed runs took its labels from the config as it is now: runs that read
    stdlib_tests text, BABILong at 0k with 4 samples, were titled stdlib_heldout, 1k, 1 per task. Now the labels
    are the runs' recorded ``spec.eval``, and one line says where the config differs."""
    from torchtune_longshort.study.fields import plain

    cfg = _one_method_config(tmp_path)
    used = {k: v for k, v in plain(cfg.eval.as_dict()).items() if k != "eval_base"}  # as Study.spec_of records it
    used.update(ppl_source="stdlib_tests", ppl_lengths=[128, 256], max_length=512,
                babilong={**used["babilong"], "lengths": ["0k"], "n": 4})
    _committed_runs(tmp_path / "a" / "out", used)
    (tmp_path / "a" / "out" / "study.json").write_text(json.dumps({"wall_s_this_invocation": 317.1,
                                                                   "config": {"jobs": 3}}))
    summary = build_report(tmp_path / "a" / "out", tmp_path / "a" / "report", cfg)
    md = (tmp_path / "a" / "report" / "report.md").read_text()
    assert "## Perplexity (longshort_ppl, stdlib_tests text)" in md and "stdlib_heldout text" not in md
    assert "| loss | 128 | 256 | runs |" in md  # the lengths the runs were evaluated at, not the config's 4
    assert "| loss | 0k | all | runs |" in md and "| loss | 1k |" not in md
    assert "lengths 0k, 4 per task and length" in md
    line = next(x for x in md.splitlines() if x.startswith("Evaluation settings: these runs used"))
    assert "`ppl_source: stdlib_tests`" in line.split("; the config now says")[0]
    assert "`ppl_source: stdlib_heldout`" in line.split("; the config now says")[1]
    assert '`babilong.lengths: ["0k"]`, `babilong.n: 4`' in line and "`max_length: 512`" in line
    assert summary["eval_used"]["settings"]["ppl_source"] == "stdlib_tests"
    # the wall time's fine-tunes at once: the invocation's (its study.json), not the config's now (1)
    assert "- the last invocation of the study command: 317 s (5.3 min), 3 fine-tunes at once\n" in md
    # runs that disagree: the report says so, each value with its runs, and keeps the config's label
    _committed_runs(tmp_path / "b" / "out", used, split={"base": {**used, "ppl_source": "stdlib_heldout"}})
    (tmp_path / "b" / "out" / "study.json").write_text(json.dumps({"wall_s_this_invocation": 317.1}))
    build_report(tmp_path / "b" / "out", tmp_path / "b" / "report", cfg)
    md = (tmp_path / "b" / "report" / "report.md").read_text()
    assert "`ppl_source`: stdlib_heldout (base); stdlib_tests (pi_a0_s0, pi_a0.1_s0)." in md
    assert "## Perplexity (longshort_ppl, stdlib_heldout text)" in md and "| loss | 0k | all | runs |" in md
    assert "- the last invocation of the study command: 317 s (5.3 min)\n" in md  # its jobs not recorded: unsaid
    # a record this version cannot read (a nested key since renamed): named, the others still label the report
    from torchtune_longshort.study.eval_used import eval_used

    recs = {k: {"key": k, "status": "ok", "spec": {"eval": used}} for k in ("base", "pi_a0_s0")}
    recs["base"]["spec"] = {"eval": {**used, "babilong": {**used["babilong"], "lenghts": ["0k"]}}}
    now, lines = eval_used(cfg, recs)
    assert now.eval.ppl_source == "stdlib_tests" and lines[0].startswith("Run base's recorded eval settings cannot")


def test_babilong_note_names_the_group_its_runs_scored(tmp_path):
    """Runs of a version that scored the whole five-task group while one task was asked: before, the rebuilt note
    said 'one marked (k/1 tasks)' beside cells marked (1/5 tasks); now it names the group the runs scored."""
    from torchtune_longshort.study.fields import plain

    cfg = _one_method_config(tmp_path)
    used = {k: v for k, v in plain(cfg.eval.as_dict()).items() if k != "eval_base"}
    used["babilong"] = {**used["babilong"], "qa": "qa1"}
    _committed_runs(tmp_path / "out", used, group=[f"longshort_babilong_qa{i}" for i in range(1, 6)])
    build_report(tmp_path / "out", tmp_path / "report", cfg)
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## BABILong QA1 accuracy", 1)[1].split("\n## ", 1)[0]
    assert "These runs scored the group `longshort_babilong` over QA1-QA5" in section
    assert "(k/5 tasks)" in section and "(k/1 tasks)" not in section and "0.5 (1/5 tasks)" in section
