"""The claim-by-claim report on a grid whose true effects are known.

A fake executor plays the recipe and lm-eval: every score is a known function of the run's recipe config
(alpha, e range, divergence, equal-compute steps) plus a seed term shared by all configurations (which the pairing
by seed must cancel) and a small per-run jitter (so that the intervals are not degenerate). The verdicts must then
come out as the planted effects say, and the report must state them.
"""

import json
import math
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from scipy import stats

from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.study.claims import analyze, claim_table1
from torchtune_longshort.study.comparisons import by_seed
from torchtune_longshort.study.eval_config import metric_of
from torchtune_longshort.study.report import build_report
from torchtune_longshort.study.tables import load_records
from plot_helpers import assert_png_drawn

ROOT = Path(__file__).resolve().parents[1]

# planted perplexity effects against CE (alpha 0), in ppl units
EFFECT = {"main": {0.0: 0.0, 0.1: -0.6, 0.3: -0.5, 1.0: +1.2}, "e1-L_4": -0.6, "eL_4-L_2": -0.6, "e1-L": +1.0,
          "jeffreys": -0.3, "js": 0.0, "eqc": -0.5}


METHOD_EFFECT = {"pi": 0.0, "yarn": -1.0}  # planted: YaRN's fine-tunes 1 ppl better than PI's at every length


def _jitter(key: str) -> float:
    return ((zlib.crc32(key.encode()) % 1000) / 1000 - 0.5) * 0.1  # in [-0.05, 0.05)


def _effect(rc: dict, key: str) -> float:
    parts = key.rsplit("_s", 1)[0].split("_", 2)  # method, a<alpha>[, variant tag]
    return EFFECT[parts[2]] if len(parts) == 3 else EFFECT["main"][rc["loss"]["alpha"]]


class ClaimsExecutor:
    def __call__(self, argv, log_path, cwd, env, timeout):
        argv = list(argv)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if Path(argv[0]).name == "tune":
            rc = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())
            out = Path(rc["output_dir"])
            steps = rc["max_steps"]
            if rc.get("equal_compute_overhead") and rc["loss"]["alpha"] > 0:  # what the recipe trains (Appendix F)
                steps = math.floor(steps / rc["equal_compute_overhead"])
            (out / f"step_{steps}").mkdir(parents=True)
            (out / f"step_{steps}" / "config.json").write_text("{}")
            key = out.parent.name
            ce = 2.0 + _jitter(key + "ce") * 4  # training CE: unrelated to the long-context scores
            (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": ce, "ce": ce, "misalignment": 1.0}))
            return 0
        if "babilong.generator" in " ".join(argv):
            Path(argv[argv.index("--out") + 1]).mkdir(parents=True, exist_ok=True)
            return 0
        margs = dict(kv.split("=", 1) for kv in argv[argv.index("--model_args") + 1].split(","))
        run_dir = Path(margs["pretrained"]).parents[1]
        key = run_dir.name
        rc = yaml.safe_load((run_dir / "recipe.yaml").read_text())
        base = key == "base"
        eff = 3.0 if base else _effect(rc, key) + METHOD_EFFECT[key.split("_")[0]]
        seed = 0 if base else rc["seed"]
        meta = json.loads(argv[argv.index("--metadata") + 1])
        res = {}
        for t in argv[argv.index("--tasks") + 1].split(","):
            prefix = {"longshort_ppl": "ppl", "longshort_misalignment": "mis", "longshort_passkey": "passkey"}.get(t)
            r = res.setdefault(t, {})
            for n in meta.get(f"{prefix}_max_seq_lengths", []):
                lab = f"{n // 1024}k" if n % 1024 == 0 else str(n)
                ppl = 10 + n / 100 + eff + 0.7 * seed + _jitter(key + t + lab)
                if t == "longshort_ppl":
                    r[f"ppl_{lab},none"] = ppl
                elif t == "longshort_misalignment":
                    sce = ppl / 5 + _jitter(key + "m")
                    # planted mean entropy (H(p) + H(q)) / 2 = 2 + eff, so Jeffreys = SCE - 2 (2 + eff)
                    r.update({f"sce_{lab},none": sce, f"jeffreys_{lab},none": sce - 2 * (2.0 + eff),
                              f"js_{lab},none": 0.01})
                elif t == "longshort_passkey":
                    r.update({"acc,none": 0.0, f"acc_{lab},none": 0.0, f"acc_{lab}_d0,none": 0.0})  # no signal
            if t == "longshort_babilong":
                r.update({"acc,none": 0.0, "acc_1k,none": 0.0})
        out = Path(argv[argv.index("--output_path") + 1]) / "model"
        out.mkdir(parents=True, exist_ok=True)
        (out / "results_2026-01-01T00-00-00.json").write_text(json.dumps({"results": res}))
        return 0


def _cfg(tmp_path, methods=None):
    raw = yaml.safe_load((ROOT / "configs/study/cpu_small.yaml").read_text())
    raw.update(methods=methods or {"pi": {"method": "linear"}}, alphas=[0, 0.1, 0.3, 1.0], seeds=[0, 1, 2],
               variants={"e_range": {"method": "pi", "alpha": 0.1, "ranges": [[1, "L/4"], ["L/4", "L/2"], [1, "L"]]},
                         "divergence": {"method": "pi", "alphas": [0.1], "divergences": ["jeffreys", "js"]},
                         "equal_compute": {"method": "pi", "alpha": 0.1, "overhead": 1.0526}})
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_study_config(p, repo_root=ROOT)


def _base(cfg, **fields):
    """``cfg`` with some of its ``base`` fields changed."""
    return replace(cfg, base=replace(cfg.base, **fields))


def test_variants_in_the_grid_and_their_recipe_configs(tmp_path):
    cfg = _cfg(tmp_path)
    study = Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=ClaimsExecutor(), log=lambda m: None)
    runs = {r.key: r for r in study.runs()}
    assert len(runs) == 3 * (4 + 3 + 2 + 1)
    assert runs["pi_a0.1_e1-L_4_s2"].overrides == {"e_range": [1, "L/4"]}
    rc = study.recipe_config("pi_a0.1_jeffreys_s0", runs["pi_a0.1_jeffreys_s0"])
    assert rc["loss"]["divergence"] == "jeffreys" and rc["loss"]["alpha"] == 0.1
    assert study.recipe_config("pi_a0.1_eqc_s1", runs["pi_a0.1_eqc_s1"])["equal_compute_overhead"] == 1.0526
    assert study.recipe_config("pi_a0.1_e1-L_s1", runs["pi_a0.1_e1-L_s1"])["e_range"] == [1, "L"]


@pytest.fixture(scope="module")
def pi_yarn(tmp_path_factory):
    """``(config, output folder)`` of the planted grid on PI and YaRN (the variants on PI), run once by the fake
    executor for the tests that read it (none writes into it)."""
    tmp = tmp_path_factory.mktemp("pi_yarn")
    cfg = _cfg(tmp, methods={"pi": {"method": "linear"}, "yarn": {"method": "yarn"}})
    Study(cfg, output_dir=tmp / "out", repo_root=ROOT, executor=ClaimsExecutor(), log=lambda m: None).run()
    return cfg, tmp / "out"


def test_verdicts_follow_the_planted_effects(tmp_path, pi_yarn):
    cfg, out = pi_yarn
    recs = load_records(out, cfg)
    assert all(r["status"] == "ok" for r in recs.values()), {k: r.get("error") for k, r in recs.items()}
    assert recs["pi_a0.1_eqc_s0"]["checkpoint"].endswith("step_19")  # floor(20 / 1.0526): the recipe's steps
    got = analyze(cfg, recs)
    v = {c["id"]: c for c in got["claims"]}
    assert v["tables2_3"]["verdict"] == "held"
    assert v["table6"]["verdict"] == "held"  # alpha 1.0 is worse, as planted
    # a grid without alpha >= 0.5 says so (it said "no alpha in []")
    from torchtune_longshort.study.claims import claim_alpha

    none = claim_alpha(replace(cfg, alphas=[0.0, 0.1]), recs, [], "worse", "table6", asked=">= 0.5")
    assert none["verdict"] == "not measurable here" and none["reason"] == "no alpha >= 0.5 in this study's grid"
    assert v["tables9_10"]["verdict"] == "held"
    # planted: [1, L/4] and [L/4, L/2] equal to [1, L/2] (the paper: the second is slightly worse), [1, L] worse
    t7 = {}
    for c in v["table7"]["comparisons"]:
        t7.setdefault(tuple(c["e_range"]), set()).add(c["direction"])
    assert t7 == {(1, "L/4"): {"no difference"}, ("L/4", "L/2"): {"no difference"}, (1, "L"): {"worse"}}
    assert v["table7"]["verdict"] == "partly held"
    assert v["tables4_5"]["verdict"] == "not measurable here"  # QA is 0 everywhere
    assert v["table1"]["verdict"] == "held"  # the metric tracks ppl by construction; training CE does not
    # the same checkpoints with the metric's sign flipped: as strong a correlation, the wrong way round
    from torchtune_longshort.study.claims import claim_table1
    from torchtune_longshort.study.eval_config import metric_of

    task, metric = metric_of("misalignment", cfg.L)
    flipped = {k: {**r, "results": {**r["results"], task: {**r["results"][task], metric: -r["results"][task][metric]}}}
               if k != "base" else r for k, r in recs.items()}
    t1 = claim_table1(cfg, flipped)
    assert t1["verdict"] == "not held" and "correlates the opposite way" in t1["reason"]
    # pairing by seed cancels the shared seed term: the paired mean equals the planted effect (jitter <= 0.1)
    c = next(c for c in v["tables2_3"]["comparisons"] if c["treated"] == "pi_a0.1" and c["family"] == "ppl")
    assert abs(c["mean"] - EFFECT["main"][0.1]) < 0.1 and c["seeds"] == [0, 1, 2]
    assert by_seed(cfg, recs, "pi_a0", "ppl", 512)[2] - by_seed(cfg, recs, "pi_a0", "ppl", 512)[0] > 1.3
    # CE over base: the planted base is 3 ppl worse at every length
    assert all(abs(r["ratio"] - r["ce_mean"] / r["base"]) < 1e-12 and r["ratio"] < 1 for r in got["ce_vs_base"])
    assert {(r["length"] <= cfg.L0, r["control"]) for r in got["ce_vs_base"]} == {
        (True, "recovers the base"), (False, "beats the base")}
    ent = {r["config"]: r["means"]["entropy"] for r in got["per_config"]}
    assert abs(ent["pi_a1"] - (2.0 + EFFECT["main"][1.0])) < 1e-9 and abs(ent["pi_a0"] - 2.0) < 1e-9

    summary = build_report(out, tmp_path / "report", cfg)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "### tables2_3: HELD" in md and "### tables4_5: NOT MEASURABLE HERE" in md
    assert "What the CE-only fine-tunes learned" in md
    assert "The base model: how it fails beyond L0" in md and "Do the RoPE methods differ?" in md
    for png in ("base_failure.png", "metric_vs_performance.png", "alpha_curves.png", "e_range_bars.png",
                "divergence_bars.png"):
        assert png in summary["plots"]
        assert_png_drawn(tmp_path / "report" / png)
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["claims"]["claims"][1]["verdict"] == "held"


def test_methods_are_compared_pairwise_and_the_base_failure_is_reported(pi_yarn):
    from torchtune_longshort.study.base_failure import base_failure, base_gate_refusal

    cfg, out = pi_yarn
    recs = load_records(out, cfg)
    got = analyze(cfg, recs)["methods"]
    assert got["verdict"] == "differ measurably"
    for c in got["comparisons"]:
        assert (c["treated"], c["control"]) == ("yarn_a0", "pi_a0") and c["direction"] == "better"
        assert abs(c["mean"] - METHOD_EFFECT["yarn"]) < 0.1
    # the base: ppl by length and per-position ratios from a planted curve (loss 1 nat higher beyond L0)
    L0 = cfg.L0
    curve = [2.0] * L0 + [2.5] * (2 * L0) + [3.0] * L0
    rec = {"results": {"longshort_ppl": {f"ppl_{L0}": 10.0, f"ppl_{4 * L0}": 25.0}}, "curves": {str(4 * L0): curve}}
    cfg = replace(cfg, eval=replace(cfg.eval, ppl_lengths=[L0, 4 * L0]))
    b = base_failure(cfg, rec)
    assert b["sequence_ratio"] == 2.5
    assert abs(b["position_ratio"] - math.e) < 1e-12  # exp(3.0 - 2.0)
    assert [(r["lo"], r["hi"]) for r in b["bins"]] == [(0, L0), (L0, 2 * L0), (2 * L0, 4 * L0)]
    assert abs(b["bins"][1]["ppl"] - math.exp(2.5)) < 1e-9
    assert abs(b["late_position_ratio"] - math.e) < 1e-12  # [L0/2, L0) is at 2.0 nats as well
    # the gate: which ratio it reads, and the reason it gives
    rec["status"] = "ok"
    cfg = _base(cfg, min_ppl_ratio=2.0, gate_measure="sequence")
    assert base_gate_refusal(cfg, rec) is None
    cfg = _base(cfg, min_ppl_ratio=2.6)
    assert "its sequence ratio is 2.5 < base.min_ppl_ratio=2.6" in base_gate_refusal(cfg, rec)
    cfg = _base(cfg, gate_measure="positions")
    assert base_gate_refusal(cfg, rec) is None  # e = 2.718 >= 2.6
    # the report says that the reading the gate does not use (sequence: 2.5 < 2.6) would have refused this base
    from torchtune_longshort.study.claims_markdown import base_section

    md = "\n".join(base_section(b, cfg))
    assert "The sequence ratio (2.5) is below base.min_ppl_ratio = 2.6" in md and "ran on the positions ratio" in md
    cfg = _base(cfg, gate_measure="sequence", min_ppl_ratio=2.0)
    assert "is below base.min_ppl_ratio" not in "\n".join(base_section(b, cfg))  # both readings pass 2.0
    cfg = _base(cfg, min_ppl_ratio=None)
    assert base_gate_refusal(cfg, rec) is None


def test_a_method_whose_ce_baseline_did_not_learn_the_extension_is_not_measurable(tmp_path, monkeypatch):
    # planted: CLEX's fine-tunes 5 ppl worse than PI's, so its CE-only runs end above the base (planted +3) at every
    # length; alpha 0.1 still beats CLEX's own CE by the planted 0.6, which the intervals see
    monkeypatch.setitem(METHOD_EFFECT, "clex", 5.0)
    cfg = _cfg(tmp_path, methods={"pi": {"method": "linear"}, "clex": {"method": "clex"}})
    study = Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=ClaimsExecutor(), log=lambda m: None)
    study.run()
    claims = {c["id"]: c for c in analyze(cfg, load_records(tmp_path / "out", cfg))["claims"]}
    t23 = claims["tables2_3"]
    assert t23["per_method"]["pi"]["verdict"] == "held"
    clex = t23["per_method"]["clex"]
    assert clex["verdict"] == "not measurable here"
    assert "did not learn the extension" in clex["reason"] and "the intervals alone would say: held" in clex["reason"]
    assert t23["verdict"] == "held"  # held wherever it is measurable; the reason names CLEX's
    assert claims["table6"]["per_method"]["clex"]["verdict"] == "not measurable here"
    build_report(tmp_path / "out", tmp_path / "report", cfg)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "clex: not measurable here (the CE-only fine-tunes did not learn the extension" in md
    # the controls' rule, per length: CLEX's control neither recovers the base within L0 nor beats it beyond
    ce = {(r["method"], r["length"] <= cfg.L0): r["control"] for r in analyze(cfg, load_records(
        tmp_path / "out", cfg))["ce_vs_base"]}
    assert ce[("clex", True)].startswith("does NOT recover") and ce[("clex", False)] == "does NOT beat the base"
    assert ce[("pi", True)] == "recovers the base" and ce[("pi", False)] == "beats the base"
    assert "Not recovered within L0: clex at " in md and "pi at" not in md.split("Not recovered within L0:")[1][:80]


def _table1_records(cfg, ppls, mis):
    """Records of the first ``len(ppls)`` runs of the grid (the rest not run): ppl at every length, the metric at L."""
    recs = {}
    for r, p, m in zip(cfg.grid, ppls, mis):
        res = {}
        for n in cfg.eval.ppl_lengths:
            task, metric = metric_of("ppl", n)
            res.setdefault(task, {})[metric] = p + n / 100
        task, metric = metric_of("misalignment", cfg.L)
        res.setdefault(task, {})[metric] = m
        recs[r.key] = {"status": "ok", "results": res, "train": {"mean_last_5": {"ce": 2.0 + 0.1 * (len(recs) % 2)}}}
    return recs


def test_table1_claim_without_an_interval_says_so(tmp_path):
    """3 checkpoints: rho is defined, its Fisher-z interval is not; the verdict was 'not held ... the metric's
    interval holds 0'. A perfect ranking (|rho| = 1, Fisher's z infinite) got the interval [1, 1] and 'held' at
    4 checkpoints, where the exact permutation p is 2 / 4! = 0.083; 5 checkpoints: p = 2 / 5! = 0.017, held."""
    cfg = _cfg(tmp_path)
    # rho undefined: the reason names which cause (it said "fewer than 3 ..., or a value the same ..." for both)
    two = claim_table1(cfg, _table1_records(cfg, [10.0, 12.0], [1.0, 3.0]))
    assert two["reason"] == "2 checkpoints with both values (at least 3 needed): no rank correlation", two["reason"]
    flat = claim_table1(cfg, _table1_records(cfg, [10.0, 12.0, 11.0, 13.0], [2.0] * 4))
    assert flat["verdict"] == "not measurable here" and flat["reason"] == (
        f"misalignment (Eq. 4) at {length_label(cfg.L)} the same for every checkpoint: no rank correlation")
    three = claim_table1(cfg, _table1_records(cfg, [10.0, 12.0, 11.0], [1.0, 3.0, 2.0]))
    assert three["verdict"] == "not measurable here" and "no interval with 3 checkpoints" in three["reason"]
    for n, want in ((4, "not held"), (5, "held")):
        ppls = [10.0, 14.0, 11.0, 13.0, 12.0][:n]
        mis = [x / 5 for x in ppls]
        t1 = claim_table1(cfg, _table1_records(cfg, ppls, mis))
        row = next(r for r in t1["correlations"] if r["predictor"].startswith("misalignment")
                   and r["target"] == f"ppl at {length_label(max(cfg.eval.ppl_lengths))}")
        assert row["spearman"] == 1.0 and row["spearman_lo"] is row["spearman_hi"] is None
        p = 2 / math.factorial(n)  # the two orderings with |rho| = 1
        assert stats.permutation_test((mis,), lambda y: abs(stats.spearmanr(ppls, y).statistic),
                                      permutation_type="pairings", alternative="greater").pvalue == pytest.approx(p)
        assert t1["verdict"] == want and f"permutation p = {p:.3g}" in t1["reason"], t1["reason"]
