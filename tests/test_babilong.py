"""BABILong: the generator's samples (answers recomputed from the story by the independent checker of
``test_babilong_answers``, lengths and fact depths measured in tokens), the loader, the task end to end and the
generated group YAML; the official answer comparison and the stories' answers are ``test_babilong_answers``'s, the
generator's refusals, haystacks and stops ``test_babilong_generator``'s."""

from __future__ import annotations

import glob
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_babilong_answers import OFFICIAL_LABELS, check_answer, ref_compare_answers

from torchtune_longshort.eval.tasks.babilong import task as bl
from torchtune_longshort.eval.tasks.babilong import generator as gen
from torchtune_longshort.eval.tasks.babilong import haystack
from torchtune_longshort.eval.tasks.babilong import stories
from torchtune_longshort.eval.tasks import tasks_path

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------- lengths and depths in tokens


@pytest.fixture(scope="module")
def sp(sp_tokenizer_dir):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(Path(sp_tokenizer_dir) / "tokenizer.model"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory, sp_tokenizer_dir):
    out = tmp_path_factory.mktemp("babilong")
    gen.generate(out / "plain", lengths=["0k", "1k", "4k"], n=3, tokenizer=str(sp_tokenizer_dir), seed=1)
    gen.generate(out / "depth", lengths=["1k", "4k"], n=2, depths=list(haystack.DEPTHS), tokenizer=str(sp_tokenizer_dir), seed=2)
    return out


def _rows(folder):
    return [json.loads(l) for f in sorted(glob.glob(str(folder / "*" / "qa*.jsonl"))) for l in open(f)]


def test_generated_rows_lengths_and_answers(generated, sp):
    rows = _rows(generated / "plain")
    assert len(rows) == 3 * 5 * 3
    for r in rows:
        assert check_answer(r["facts"], r["question"]) == r["target"]
        n = len(sp.encode(r["input"]))  # measured here, not taken from the row
        assert n == r["n_tokens"]
        if r["length"] == "0k":
            assert r["input"] == " ".join(r["facts"])
        else:
            assert haystack.within_length_tolerance(n, haystack.LENGTHS[r["length"]]), (r["length"], n)
        # Facts appear in order at their recorded offsets.
        for off, fact in zip(r["fact_char_offsets"], r["facts"]):
            assert r["input"][off : off + len(fact)] == fact
        assert r["fact_char_offsets"] == sorted(r["fact_char_offsets"])


def test_generated_facts_land_at_requested_depth(generated, sp):
    rows = _rows(generated / "depth")
    assert sorted({r["depth"] for r in rows}) == list(haystack.DEPTHS) and {r["length"] for r in rows} == {"1k", "4k"}
    for r in rows:
        assert check_answer(r["facts"], r["question"]) == r["target"]
        block = " ".join(r["facts"])
        start = r["input"].index(block)
        before = len(sp.encode(r["input"][:start])) if start else 0
        hay = len(sp.encode(r["input"])) - len(sp.encode(block))
        assert haystack.within_depth_tolerance(before / hay, r["depth"], hay), (r["depth"], before / hay)
        assert abs(before / hay - r["depth"] / 100) <= 0.02 + 8 / hay  # the stated tolerance (docs), by hand
        assert haystack.within_length_tolerance(r["n_tokens"], haystack.LENGTHS[r["length"]])


@pytest.mark.parametrize("depth, cut", [(25, (2, 5)), (50, (5, 0)), (73, (7, 3)), (100, (10, 0)), (0, (0, 0))])
def test_the_story_goes_in_at_the_word_where_depth_percent_of_the_haystack_tokens_lie_before_it(depth, cut):
    # one token per word, ten lines of ten words: depth d % puts the block after d words, inside a line if need be
    hay = [" ".join(f"w{i}_{k}" for k in range(10)) for i in range(10)]
    segments, (at,) = haystack._place_at_depth(hay, [10] * 10, "BLOCK", depth, lambda s: len(s.split()))
    assert segments[at] == "BLOCK" and " ".join(segments).split() == (
        " ".join(hay).split()[: 10 * cut[0] + cut[1]] + ["BLOCK"] + " ".join(hay).split()[10 * cut[0] + cut[1]:])


# ----------------------------------------------------------------------- loader and scoring


def test_loader_multi_length_depth_keys_and_missing(generated):
    ds = bl.load_babilong("qa2", "1k,4k", str(generated / "depth"))["qa2"]
    assert len(ds) == 2 * 5 * 2 and set(ds["length"]) == {"1k", "4k"}
    doc = ds[0]
    out = bl.process_results(doc, [doc["target"] + ". Then more."])
    assert out == {"acc": 1.0, f"acc_{doc['length']}": 1.0, f"acc_d{doc['depth']}": 1.0,
                   f"acc_{doc['length']}_d{doc['depth']}": 1.0}
    assert set(out) <= set(bl.metric_names())
    # A length without a file: reported, not fatal; with babilong_missing=error it raises.
    ds = bl.load_babilong("qa1", "0k,2k", str(generated / "plain"))["qa1"]
    missing = [d for d in ds if d[bl.MISSING_DATA_FIELD]]
    assert len(missing) == 1 and "2k/qa1.jsonl" in missing[0][bl.MISSING_DATA_FIELD]
    assert bl.process_results(missing[0], ["x"]) == {"missing_data": 1.0, "error": missing[0][bl.MISSING_DATA_FIELD]}
    with pytest.raises(FileNotFoundError, match="2k/qa1.jsonl"):
        bl.load_babilong("qa1", "2k", str(generated / "plain"), babilong_missing="error")


def test_loader_interleaves_lengths_and_depths_for_limit(generated):
    """lm-eval's --limit N takes the first N rows: they hold every length (then every length x depth cell) in turn,
    each cell's rows in their file's order (before: the first length's rows all came first)."""
    ds = bl.load_babilong("qa2", "1k,4k", str(generated / "depth"))["qa2"]
    cells = [(r["length"], r["depth"]) for r in ds]
    n_cells = len(set(cells))
    assert n_cells == 2 * len(haystack.DEPTHS) and {c[0] for c in cells[:2]} == {"1k", "4k"}
    assert len(set(cells[:n_cells])) == n_cells
    for length in ("1k", "4k"):  # order inside a cell: the file's
        alone = bl.load_babilong("qa2", length, str(generated / "depth"))["qa2"]
        # one length alone interleaves its depths too (it was read as its file is: --limit 2 took two rows of d0)
        assert [r["depth"] for r in alone][:len(haystack.DEPTHS)] == list(haystack.DEPTHS)
        for depth in haystack.DEPTHS:
            assert [r["input"] for r in ds if (r["length"], r["depth"]) == (length, depth)] == [
                r["input"] for r in alone if r["depth"] == depth]
    with pytest.raises(ValueError, match="max_seq_lengths='5k'"):
        bl.load_babilong("qa1", "5k", str(generated / "plain"))
    with pytest.raises(ValueError, match="qa_split='qa7'"):
        bl.load_babilong("qa7", "0k", str(generated / "plain"))


def test_an_over_long_prompt_is_refused_under_hf_as_under_longshort(generated, sp_tokenizer_dir):
    """BABILong never cuts a prompt: every row declares it, so a prompt longer than lm-eval's ``hf`` model is not
    sent (NaN with the reason), as the ``longshort`` model refuses it. Before, the rows declared nothing and hf's
    own left cut applied: ``hf`` scored the cut prompts (0.0 on a 512-position model) where ``longshort`` gave NaN."""
    from lm_eval.tasks import TaskManager

    assert set(bl.load_babilong("qa1", "0k", str(generated / "plain"))["qa1"]["prompt_truncation"]) == {"none"}
    meta = {"tokenizer": str(sp_tokenizer_dir), "babilong_data_dir": str(generated / "plain"),
            "max_seq_lengths": "0k", "lm_eval_model": "hf", "max_length": 128}
    task = TaskManager(include_path=str(tasks_path()), include_defaults=False,
                       metadata=meta).load(["longshort_babilong_qa1"])["tasks"]["longshort_babilong_qa1"]
    task.build_all_requests(limit=1, rank=0, world_size=1)
    (inst,) = task.instances
    assert inst.repeats == 0, "sent to hf, which would cut it from the left"
    assert "may not be cut (truncation=none, declared by the task)" in inst.resps[0].refusal


def test_a_limit_that_leaves_cells_without_a_document_is_said_and_recorded(generated, sp_tokenizer_dir, caplog):
    """``--limit 3`` of 2 lengths x 5 depths scored 3 cells and left 7 out without a word (the README said a small
    limit still scores every length); now a warning names them and the results file's task config lists them."""
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval.cli_messages import summary_line

    meta = {"tokenizer": str(sp_tokenizer_dir), "babilong_data_dir": str(generated / "depth"),
            "max_seq_lengths": "1k,4k", "lm_eval_model": "hf", "max_length": 8192}
    task = TaskManager(include_path=str(tasks_path()), include_defaults=False,
                       metadata=meta).load(["longshort_babilong_qa2"])["tasks"]["longshort_babilong_qa2"]
    with caplog.at_level("WARNING"):
        task.build_all_requests(limit=3, rank=0, world_size=1)
    cells = [f"{n}_d{d}" for d in haystack.DEPTHS for n in ("1k", "4k")]
    assert task.left_out == cells[3:] and task.dump_config()["limit_left_out"] == cells[3:]
    assert (f"longshort_babilong_qa2: --limit 3 leaves 7 of its 10 length x depth cells without a document: "
            f"{', '.join(cells[3:])}; give --limit 10 or more") in caplog.text
    line = summary_line({"results": {"longshort_babilong_qa2": {"acc,none": 0.5}},
                         "configs": {"longshort_babilong_qa2": task.dump_config()}})
    assert line.endswith("none unscored; --limit left without a document: longshort_babilong_qa2: "
                         + ", ".join(cells[3:]))
    task.build_all_requests(limit=10, rank=0, world_size=1)
    assert task.left_out == [] and "limit_left_out" not in task.dump_config()


def test_loader_rejects_rows_not_in_babilong_format(tmp_path):
    """Each bad row is named by file and line: raised with babilong_missing=error, else that length scores no number
    and carries the reason while the other lengths load (a bad line ended the whole run: a bare JSONDecodeError,
    naming no file, or an AttributeError at scoring)."""
    (tmp_path / "0k").mkdir()
    (tmp_path / "0k" / "qa1.jsonl").write_text(json.dumps({"input": "x", "question": "q", "target": "kitchen"}) + "\n")
    (tmp_path / "1k").mkdir()
    good = json.dumps({"input": "x", "question": "q", "target": "kitchen"})
    for bad, match in (
            (json.dumps({"input": "x", "target": "kitchen"}), r"qa1.jsonl:2: field\(s\) \['question'\] missing"),
            (json.dumps({"input": "x", "question": "q", "target": "kitchen", "length": "4k"}),
             "qa1.jsonl:2: length='4k' but the file is in the '1k' folder"),
            ("{bad json", r"qa1.jsonl:2: not a JSON line"), ("[1, 2]", "qa1.jsonl:2: a JSON list"),
            (json.dumps({"input": "x", "question": "q", "target": None}),
             r"qa1.jsonl:2: field\(s\) \['target'\] are not strings \(target=None\)")):
        (tmp_path / "1k" / "qa1.jsonl").write_text(good + "\n" + bad + "\n")
        with pytest.raises(ValueError, match=match):
            bl.load_babilong("qa1", "1k", str(tmp_path), babilong_missing="error")
        ds = bl.load_babilong("qa1", "0k,1k", str(tmp_path))["qa1"]
        reasons = {d["length"]: d[bl.MISSING_DATA_FIELD] for d in ds}
        assert reasons["0k"] is None and re.search(match, reasons["1k"]), reasons
    (tmp_path / "1k" / "qa1.jsonl").write_text("\ufeff" + good + "\n", encoding="utf-8")  # a byte-order mark
    assert bl.load_babilong("qa1", "1k", str(tmp_path))["qa1"]["input"] == ["x"]


@pytest.mark.parametrize("task", ["longshort_babilong", "longshort_babilong_qa1"])
def test_token_counts_in_the_shared_lengths_key_are_refused_before_lm_eval_starts(tmp_path, tiny_llama2_dir,
                                                                                   sp_tokenizer_dir, task):
    # max_seq_lengths=64,128 (meant for longshort_ppl) ended the run once the model had loaded, naming no task
    from torchtune_longshort.eval.cli_run import run_cli

    with pytest.raises(ValueError, match=rf"max_seq_lengths='64,128': {task} reads it as its length labels "
                                         r"\(0k, 1k.*give the other tasks their own lengths \(ppl_max_seq_lengths"):
        run_cli(["run", "--model", "longshort", "--model_args",
                 f"checkpoint_dir={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}", "--device", "cpu",
                 "--tasks", f"longshort_ppl,{task}", "--metadata", json.dumps({"max_seq_lengths": "64,128"}),
                 "--output_path", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_babilong_end_to_end(tmp_path, generated, tiny_llama2_dir, sp_tokenizer_dir):
    env = dict(os.environ, TMPDIR=str(tmp_path))  # conftest's offline HF_* and cache folders: the zygote's (forked)
    cmd = [sys.executable, "-m", "torchtune_longshort.eval", "run", "--model", "longshort",
           "--model_args",
           f"checkpoint_dir={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},max_length=2048,allow_extrapolation=true",
           "--tasks", "longshort_babilong",
           "--metadata", json.dumps({"max_seq_lengths": "1k,8k", "babilong_data_dir": str(generated / "depth")}),
           "--gen_kwargs", "max_gen_toks=6", "--output_path", str(tmp_path / "out"), "--log_samples"]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    assert "8k/qa1.jsonl" in p.stdout + p.stderr  # the 8k files do not exist: reported, run goes on
    res = json.load(open(glob.glob(str(tmp_path / "out" / "**" / "results_*.json"), recursive=True)[0]))["results"]
    for qa in stories.QA_TASKS:
        samples = [json.loads(l) for f in glob.glob(str(tmp_path / "out" / "**" / f"samples_{bl.task_of(qa)}_*.jsonl"),
                                                     recursive=True) for l in open(f)]
        scored = [s for s in samples if not s["doc"][bl.MISSING_DATA_FIELD]]
        assert len(scored) == 10 and len(samples) == 11
        for length in ("1k",):
            for depth in haystack.DEPTHS:
                cell = [s for s in scored if s["doc"]["length"] == length and s["doc"]["depth"] == depth]
                want = sum(ref_compare_answers(s["doc"]["target"], s["filtered_resps"][0], s["doc"]["question"],
                                               OFFICIAL_LABELS[qa]) for s in cell) / len(cell)
                assert res[bl.task_of(qa)][f"acc_{length}_d{depth},none"] == pytest.approx(want)
        assert res[bl.task_of(qa)]["missing_data,none"] == 1.0
    group = res["longshort_babilong"]
    members = [res[bl.task_of(q)]["acc_1k_d50,none"] for q in stories.QA_TASKS]
    assert group["acc_1k_d50,none"] == pytest.approx(sum(members) / 5)


# ----------------------------------------------------------------------- the generated group YAML
def test_group_yaml_is_the_generators_output():
    from torchtune_longshort.eval.tasks.generate import main, stale_files

    assert stale_files() == {}, "run python -m torchtune_longshort.eval.tasks.generate"
    assert main(["--check"]) == 0


def test_group_yaml_averages_every_metric_process_results_can_report():
    """Every key process_results returns over all QA tasks, lengths and depths (and a row without data) is a
    metric the group averages, and the group averages nothing else."""
    import yaml

    from torchtune_longshort.eval.tasks.babilong.haystack import DEPTHS, LENGTHS
    from torchtune_longshort.eval.tasks.babilong.stories import QA_TASKS, TASK_LABELS

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    cfg = yaml.load((tasks_path() / "babilong/longshort_babilong.yaml").read_text(), Loader=_Loader)
    averaged = [m["metric"] for m in cfg["aggregate_metric_list"]]
    reported = set()
    for qa in QA_TASKS:
        target = sorted(TASK_LABELS[qa])[0]
        for length in LENGTHS:
            for depth in (None, *DEPTHS):
                doc = {"qa": qa, "target": target, "question": "?", "length": length, "depth": depth,
                       bl.MISSING_DATA_FIELD: None}
                reported |= set(bl.process_results(doc, [target]))
    reported |= set(bl.process_results({bl.MISSING_DATA_FIELD: "no file"}, [""]))
    assert len(averaged) == len(set(averaged))
    assert set(averaged) == reported - {"error"}
