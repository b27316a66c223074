"""The study's pre-flight check: before anything trains, a config whose evaluation cannot measure every cell is
refused (exit 2, the fields named, nothing written under the output folder): a perplexity or misalignment length
that a small local corpus cannot fill in the eval tokenizer's tokens, lengths and BABILong labels past the eval
model. A config that fits passes, and the tokenizer it counted with is the one the study's runs then use. The
counts are checked against an independent reference: the corpus tokenized here, by hand."""

from __future__ import annotations

import dataclasses

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.study import Study, StudyConfigError, load_study_config
from torchtune_longshort.study.preflight import preflight

ROOT = Path(__file__).resolve().parents[1]
CPU_SMALL = ROOT / "configs/study/cpu_small.yaml"
# A small local corpus: 12 short documents (a few hundred characters each).
WORDS = "the model reads a long text and predicts the next token from what came before it".split()


def _corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(12):
        (folder / f"doc{i:02d}.txt").write_text(" ".join(WORDS[(i + j) % len(WORDS)] for j in range(40 + 5 * i)))
    return folder


def _config(tmp_path: Path, **quick_eval) -> Path:
    raw = yaml.safe_load(CPU_SMALL.read_text())
    raw["quick"]["eval"].update(quick_eval)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _study(tmp_path: Path, **quick_eval) -> Study:
    cfg = load_study_config(_config(tmp_path, **quick_eval), quick=True, repo_root=ROOT)
    return Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, log=lambda m: None)


def test_a_length_the_corpus_cannot_fill_is_refused_before_anything_is_written(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    cfg = _config(tmp_path, ppl_lengths=[64, 512], ppl_num_samples=2, metadata={"ppl_data_files": str(corpus)})
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "torchtune_longshort.study", "--config", str(cfg), "--quick", "--out",
                        str(out), "--repo-root", str(ROOT)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    err = p.stderr
    line = next(x for x in err.splitlines() if "longshort_ppl at 512" in x)
    for needle in ("eval.ppl_lengths", "eval.ppl_num_samples=2", "eval.metadata.ppl_data_files",
                   "only 0 of num_samples=2 sequences of length=512 tokens", "longest document",
                   "eval.metadata.ppl_join_documents: true", "dropping 512 from eval.ppl_lengths"):
        assert needle in line, line
    assert "longshort_ppl at 64" not in err  # the length it can fill is not named
    assert not out.exists()  # nothing trained, nothing written (the tokenizer it counted with was a temporary one)


def test_the_counts_are_the_corpus_tokenized_by_hand(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """How many sequences the refusal says exist, against documents of >= length tokens counted by hand with the
    base's tokenizer (a given base: its tokenizer is the eval's)."""
    from torchtune_longshort.eval.tasks.common.token_sequences import TaskTokenizer

    corpus = _corpus(tmp_path / "corpus")
    tok = TaskTokenizer(str(sp_tokenizer_dir))
    counts = sorted(len(tok.encode(f.read_text())) for f in sorted(corpus.iterdir()))
    length = counts[len(counts) // 2]
    raw = yaml.safe_load(CPU_SMALL.read_text())
    raw["base"] = {"checkpoint_dir": str(tiny_llama2_dir), "tokenizer": str(sp_tokenizer_dir)}
    raw["model"].update(num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=172)  # the base's
    raw["quick"].pop("base", None)
    raw["quick"]["eval"].update(ppl_lengths=[length], ppl_num_samples=12, misalignment_lengths=[],
                                metadata={"ppl_data_files": str(corpus)})
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(raw))
    cfg = load_study_config(tmp_path / "study.yaml", quick=True, repo_root=ROOT)
    study = Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, log=lambda m: None)
    with pytest.raises(StudyConfigError) as refused:
        preflight(study, log=lambda m: None)
    have = sum(n >= length for n in counts)
    assert 0 < have < 12
    assert (f"only {have} of num_samples=12 sequences of length={length} tokens could be cut (longest document: "
            f"{counts[-1]} tokens)") in str(refused.value)
    assert f"({length} tokens of {sp_tokenizer_dir})" in str(refused.value)


def test_a_config_that_fits_passes_and_its_tokenizer_is_the_runs(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    logs = []
    study = _study(tmp_path, ppl_lengths=[64, 512], ppl_num_samples=2, longbench_e_data_dir=str(tmp_path / "lb"),
                   metadata={"ppl_data_files": str(corpus), "ppl_join_documents": True})
    assert not study.tokenizer_dir().exists()
    preflight(study, log=logs.append)
    # a LongBench folder that is not there is said, not skipped in silence (the task is left out of the study)
    assert any(f"eval.longbench_e_data_dir='{tmp_path / 'lb'}' is not a folder here: LongBench-E is not run" in m
               for m in logs), logs
    assert "longshort_longbench_e" not in study.eval_tasks()
    assert any("eval.ppl_lengths [64, 512]: 2 sequences at each length" in m and "documents joined" in m
               for m in logs), logs
    assert logs[-1].startswith("[study] pre-flight check passed")
    # the tokenizer it counted with is where the pre-training run reads it, and the eval's
    assert Path(study.eval_tokenizer()).is_file() and study.tokenizer_dir().is_dir()
    rc = study.recipe_config("base")
    assert rc["tokenizer"]["path"] == str(study.tokenizer_dir())


def test_misalignment_names_its_own_fields(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    study = _study(tmp_path, misalignment_lengths=[512], mis_num_samples=3,
                   metadata={"mis_data_files": str(corpus)})
    with pytest.raises(StudyConfigError) as refused:
        preflight(study, log=lambda m: None)
    msg = str(refused.value)
    assert "longshort_misalignment at 512" in msg and "eval.mis_num_samples=3" in msg
    assert "eval.metadata.mis_data_files" in msg and "eval.metadata.mis_join_documents: true" in msg
    assert "longshort_ppl" not in msg and not study.out.exists()


def test_lengths_and_babilong_labels_past_the_eval_model_are_refused(tmp_path):
    study = _study(tmp_path, max_length=256, ppl_lengths=[128, 512], babilong={"lengths": ["1k"], "n": 1,
                                                                               "qa": "qa1"})
    with pytest.raises(StudyConfigError) as refused:
        preflight(study, log=lambda m: None)
    msg = str(refused.value)
    assert "eval.ppl_lengths=[128, 512]: longshort_ppl at [512] tokens is past eval.max_length=256" in msg
    assert "eval.misalignment_lengths=[256, 512]" in msg  # the quick config's own 512
    assert "eval.babilong.lengths=['1k']: ['1k'] is past eval.max_length=256" in msg
    assert not study.out.exists()


def test_the_eval_model_holds_babilong_labels_by_default(tmp_path):
    study = _study(tmp_path, babilong={"lengths": ["2k"], "depths": [50], "n": 1, "qa": "qa1"})
    assert study.cfg.eval.max_length == 2048  # the swept lengths stop at 512: the label sets it


def test_the_study_generates_babilong_rows_that_fit_their_label(tmp_path):
    from test_study import FakeExecutor

    cfg = load_study_config(CPU_SMALL, repo_root=ROOT)
    ex = FakeExecutor()
    Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=ex, log=lambda m: None)._babilong_data()
    (argv,) = [a for a in ex.calls if a[1:3] == ["-m", "torchtune_longshort.eval.tasks.babilong.generator"]]
    assert argv[argv.index("--fit") + 1] == "prompt" and "--prompt" not in argv
    # BABILong's own prompt (eval.metadata.babilong_prompt) is longer: its rows were sized for lm-eval's, and the
    # longest label's requests were past eval.max_length (refused, NaN)
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, metadata={**(cfg.eval.metadata or {}),
                                                                                "babilong_prompt": "babilong"}))
    ex = FakeExecutor()
    Study(cfg, output_dir=tmp_path / "out2", repo_root=ROOT, executor=ex, log=lambda m: None)._babilong_data()
    (argv,) = [a for a in ex.calls if a[1:3] == ["-m", "torchtune_longshort.eval.tasks.babilong.generator"]]
    assert argv[argv.index("--prompt") + 1] == "babilong" and argv[argv.index("--fit") + 1] == "prompt"


@pytest.mark.slow  # the generator's subprocess builds lm-eval's task (~25 s on 2 shared cores)
def test_the_quick_study_s_babilong_requests_fit_its_eval_model(tmp_path):
    """The shipped quick variant's BABILong rows, generated for real with its tokenizer: each whole request (the
    generator's ``prompt_tokens``: BOS, lm-eval's prompt and examples, input, question, generation budget) fits
    ``eval.max_length``, so the quick report has a BABILong number (a "0k" row, the facts alone, was 577 tokens
    on a 512-token model: refused, scored NaN)."""
    cfg = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
    study = Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, log=lambda m: None)
    preflight(study, log=lambda m: None)  # trains the study's tokenizer, the one the rows are counted in
    data = study._babilong_data()
    rows = [json.loads(x) for f in sorted(data.glob("*/qa*.jsonl")) for x in f.read_text().splitlines() if x.strip()]
    assert len(rows) == cfg.eval.babilong.n * len(cfg.eval.babilong.lengths) * len(cfg.eval.babilong.qa.split(","))
    assert all(0 < r["prompt_tokens"] <= cfg.eval.max_length for r in rows), [r["prompt_tokens"] for r in rows]


def test_babilong_data_an_earlier_study_generated_is_listed_for_the_generator(tmp_path):
    # data generated before the generator listed its files (.longshort_babilong.json): the study's DONE.json proves
    # it generated them, so on a spec change it lists them and the generator replaces them instead of refusing them
    from test_study import FakeExecutor

    cfg = load_study_config(CPU_SMALL, repo_root=ROOT)
    data = tmp_path / "out" / "babilong_data"
    (data / "1k").mkdir(parents=True)
    (data / "1k" / "qa1.jsonl").write_text("{}\n")
    (data / "DONE.json").write_text('{"lengths": ["2k"]}')  # an older spec
    Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=FakeExecutor(), log=lambda m: None)._babilong_data()
    assert json.loads((data / ".longshort_babilong.json").read_text()) == ["1k/qa1.jsonl"]



def test_a_study_whose_tune_cannot_be_found_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    """The GPU route installs torchtune with ``pip install --target /tmp/site``: its ``tune`` lands in /tmp/site/bin,
    neither next to the machine's python nor on PATH unless put there. Every fine-tune would then fail at its start,
    after the base's evaluation; the study refuses first (exit 2, nothing written). Reference: an interpreter folder
    and a PATH that hold no ``tune`` (refused), the same PATH with an executable ``tune`` put on it by hand (found)."""
    from torchtune_longshort.study.__main__ import main
    from torchtune_longshort.study.stages import tune_problem

    bare = tmp_path / "bin_without_tune"
    bare.mkdir()
    monkeypatch.setattr(sys, "executable", str(bare / "python3"))
    monkeypatch.setenv("PATH", str(bare))
    out = tmp_path / "out"
    rc = main(["--config", str(_config(tmp_path)), "--quick", "--out", str(out), "--repo-root", str(ROOT)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "not next to this interpreter" in err and "PATH=/tmp/site/bin" in err
    assert not out.exists()
    site_bin = tmp_path / "site" / "bin"
    site_bin.mkdir(parents=True)
    (site_bin / "tune").write_text("#!/bin/sh\n")
    (site_bin / "tune").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bare}:{site_bin}")
    assert tune_problem() is None


def test_babilong_0k_is_sized_by_its_real_requests(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """'0k' has a budget of 0 tokens and rows of ~600 (prompt, facts, question, generation budget): before, the
    pre-flight let it through whatever eval.max_length was, and every 0k prompt was refused after the training.
    Now its requests are measured: past eval.max_length it is refused naming the tokens needed, which are those of
    the rows the generator writes (the reference: the generator's own rows, measured by it); within, it passes.
    0k with depths (the generator writes none of it) is refused."""
    from torchtune_longshort.eval.tasks.babilong.generator import generate

    def study(max_length, depths=None):
        raw = yaml.safe_load(CPU_SMALL.read_text())
        raw["base"] = {"checkpoint_dir": str(tiny_llama2_dir), "tokenizer": str(sp_tokenizer_dir)}
        raw["model"].update(num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=172)
        raw["quick"].pop("base", None)
        raw["quick"]["eval"].update(max_length=max_length, ppl_lengths=[128], passkey_lengths=[],
                                    misalignment_lengths=[],
                                    babilong={"lengths": ["0k"], "depths": depths, "n": 1, "qa": "qa1"})
        (tmp_path / "study.yaml").write_text(yaml.safe_dump(raw))
        cfg = load_study_config(tmp_path / "study.yaml", quick=True, repo_root=ROOT)
        return Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, log=lambda m: None)

    rows = [json.loads(x) for p in generate(tmp_path / "gen", ["qa1"], ["0k"], n=32, tokenizer=str(sp_tokenizer_dir),
                                            fit="prompt") for x in p.read_text().splitlines()]
    need = max(r["prompt_tokens"] + r["max_gen_toks"] for r in rows)
    assert need > 256
    with pytest.raises(StudyConfigError) as refused:
        preflight(study(256), log=lambda m: None)
    msg = str(refused.value)
    assert f"'0k' (no haystack: a row is its facts alone) needs requests of up to {need} tokens" in msg, msg
    assert f"raise eval.max_length to {need} or more, or drop '0k'" in msg and not (tmp_path / "out").exists()
    logs = []
    preflight(study(need), log=logs.append)
    assert any(f"'0k': requests of up to {need} tokens, within eval.max_length={need}" in m for m in logs), logs
    with pytest.raises(StudyConfigError, match="'0k' has no haystack to put the facts at a depth in"):
        preflight(study(need, depths=[50]), log=lambda m: None)


def test_babilong_depths_are_those_the_task_reads(tmp_path):
    """eval.babilong.depths: [10] was taken (any int in [0, 100]); the study trained, then its generator wrote rows at
    depth 10 (or, since the generator refuses them, failed), and the task refuses such rows: no BABILong score. The
    config now takes the depths the task reads, refusing another before anything runs. The task's own loader, on a
    hand-written row, is the reference."""
    from torchtune_longshort.eval.tasks.babilong.task import load_babilong
    from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

    def task_reads(depth):
        (tmp_path / "rows" / "1k").mkdir(parents=True, exist_ok=True)
        row = {"input": "Mary went to the kitchen.", "question": "Where is Mary?", "target": "kitchen", "depth": depth}
        (tmp_path / "rows" / "1k" / "qa1.jsonl").write_text(json.dumps(row) + "\n")
        try:
            load_babilong("qa1", "1k", str(tmp_path / "rows"), "error")
        except TaskDataError:
            return False
        return True

    for depth in (10, 99, 25, 100):
        babilong = {"lengths": ["1k"], "depths": [0, depth], "n": 1, "qa": "qa1"}
        if task_reads(depth):
            assert load_study_config(_config(tmp_path, babilong=babilong), quick=True,
                                     repo_root=ROOT).eval.babilong.depths == [0, depth]
            continue
        with pytest.raises((StudyConfigError, ValueError)) as refused:
            load_study_config(_config(tmp_path, babilong=babilong), quick=True, repo_root=ROOT)
        assert f"eval.babilong.depths=[0, {depth}] is not accepted" in str(refused.value), refused.value
        assert "[0, 25, 50, 75, 100]" in str(refused.value)
