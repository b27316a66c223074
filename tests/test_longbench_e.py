"""LongBench-E: scorer parity with LongBench's published metric definitions, bucket by bucket; the local
loader's checks; the 13-dataset group end to end through lm-eval's CLI on the tiny model.

The reference metrics below are written from LongBench's ``metrics.py`` / ``eval.py`` (THUDM/LongBench),
independently of lm-eval's copy that the code under test loads. Rouge-L is defined there as the ``rouge``
package's ``rouge-l`` F score; the reference calls that package directly and is itself checked against a
hand-written LCS F1 on single-sentence inputs.
"""

from __future__ import annotations

import difflib
import glob
import importlib.util
import json
import os
import re
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from torchtune_longshort.eval.tasks import IGNORED_KEY
from torchtune_longshort.eval.tasks.longbench_e import official_config as official
from torchtune_longshort.eval.tasks.longbench_e import task as lb

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ reference definitions (LongBench)


def ref_normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def ref_f1(pred_tokens, gt_tokens):
    common = sum((Counter(pred_tokens) & Counter(gt_tokens)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred_tokens), common / len(gt_tokens)
    return 2 * p * r / (p + r)


def ref_qa_f1(pred, gt, **_):
    return ref_f1(ref_normalize(pred).split(), ref_normalize(gt).split())


def ref_rouge_l(pred, gt, **_):
    from rouge import Rouge

    try:
        return Rouge().get_scores([pred], [gt], avg=True)["rouge-l"]["f"]
    except Exception:  # LongBench: any failure (e.g. empty hypothesis) scores 0
        return 0.0


def ref_classification(pred, gt, all_classes, **_):
    matches = [c for c in all_classes if c in pred]
    for m in matches:  # LongBench removes while iterating; kept as published
        if m in gt and m != gt:
            matches.remove(m)
    return 1.0 / len(matches) if gt in matches else 0.0


def _numbers_equal_fraction(pred, target):
    nums = re.findall(r"\d+", pred)
    return 0.0 if not nums else sum(n == str(target) for n in nums) / len(nums)


def ref_retrieval(pred, gt, **_):
    return _numbers_equal_fraction(pred, re.findall(r"Paragraph (\d+)", gt)[0])


def ref_count(pred, gt, **_):
    return _numbers_equal_fraction(pred, gt)


def ref_code_sim(pred, gt, **_):
    line = ""
    for candidate in pred.lstrip("\n").split("\n"):
        if "`" not in candidate and "#" not in candidate and "//" not in candidate:
            line = candidate
            break
    # fuzzywuzzy's ratio without python-Levenshtein: round(100 * difflib ratio)
    return round(100 * difflib.SequenceMatcher(None, line, gt).ratio()) / 100


REF_METRIC = {
    "qasper": ref_qa_f1, "multifieldqa_en": ref_qa_f1, "hotpotqa": ref_qa_f1, "2wikimqa": ref_qa_f1,
    "gov_report": ref_rouge_l, "multi_news": ref_rouge_l, "trec": ref_classification, "triviaqa": ref_qa_f1,
    "samsum": ref_rouge_l, "passage_count": ref_count, "passage_retrieval_en": ref_retrieval,
    "lcc": ref_code_sim, "repobench-p": ref_code_sim,
}


def ref_scorer_e(dataset, preds, answers, lengths, all_classes):
    """LongBench eval.py scorer_e, unrounded and in [0, 1]; empty buckets left out."""
    buckets = {"0_4k": [], "4_8k": [], "8k_plus": []}
    for pred, gts, length in zip(preds, answers, lengths):
        if dataset in ("trec", "triviaqa", "samsum", "lsht"):
            pred = pred.lstrip("\n").split("\n")[0]
        score = max([0.0] + [REF_METRIC[dataset](pred, gt, all_classes=all_classes) for gt in gts])
        key = "0_4k" if length < 4000 else "4_8k" if length < 8000 else "8k_plus"
        buckets[key].append(score)
    return {k: sum(v) / len(v) for k, v in buckets.items() if v}


# ------------------------------------------------------------------ fixed predictions per dataset

TREC = ["Abbreviation", "Animal", "Number of something", "Number", "Date", "Description of something"]
LENGTHS = [10, 3999, 4000, 7999, 8000, 50000]  # two per bucket, on both sides of each threshold

CASES = {
    "qasper": (["The answer is the OS module.", "unanswerable", "BERT, and a CNN", "", "yes", "An LSTM encoder"],
               [["the os module"], ["unanswerable"], ["BERT"], ["no"], ["yes", "no"], ["LSTM encoder", "GRU"]]),
    "multifieldqa_en": (["In 1999!", "Paris, France", "x", "the red car", "Ford", "two"],
                        [["1999"], ["Paris"], ["y"], ["a red car"], ["Ford Motor"], ["2"]]),
    "hotpotqa": (["Barack Obama", "no", "The Beatles band", "1961 and 1962", "A", "yes it is"],
                 [["Obama"], ["no"], ["Beatles"], ["1961"], ["B"], ["yes"]]),
    "2wikimqa": (["France", "Germany", "the", "Al Gore.", "John Smith Jr", "1900"],
                 [["France"], ["Italy"], ["The"], ["Al Gore"], ["John Smith"], ["1901"]]),
    "gov_report": (["The agency reviewed the program. It found gaps.", "", "Costs rose quickly", "The report",
                    "GAO found that costs rose. The agency agreed.", "unrelated words here"],
                   [["The agency reviewed the program and found several gaps."], ["Anything."],
                    ["Costs rose quickly in 2010."], ["The report is long."],
                    ["GAO found costs rose sharply. The agency agreed with GAO."], ["Nothing in common"]]),
    "multi_news": (["Storms hit the coast on Monday.", "A man was arrested", ".", "Markets fell",
                    "Officials said the fire is contained. Residents returned.", "rain"],
                   [["Storms hit the east coast Monday night."], ["Police arrested a man."], ["x"],
                    ["Markets fell sharply on Friday."], ["The fire is contained, officials said."], ["rain rain"]]),
    "trec": (["Number of something", "\nAnimal\nDate", "Number", "Description of something and Animal", "Date",
              "nothing"],
             [["Number of something"], ["Animal"], ["Number"], ["Animal"], ["Abbreviation"], ["Date"]]),
    "triviaqa": (["Paris\nQuestion: what", "\n\nLondon", "The Nile river", "1066", "", "Mount Everest"],
                 [["Paris"], ["London"], ["Nile"], ["1066", "AD 1066"], ["x"], ["Everest"]]),
    "samsum": (["Bob is coming at six.\nAnn: ok", "\nAnn will call Bob.", "They meet", "none", "Tom lost his keys",
                "Kate and Jim go to the cinema."],
               [["Bob is coming at six."], ["Ann will call Bob tomorrow."], ["They meet at noon."], ["x y"],
                ["Tom has lost his keys again."], ["Kate and Jim are going to the cinema."]]),
    "passage_count": (["7", "There are 7 passages, not 8", "", "5 5 5", "12", "3"],
                      [["7"], ["7"], ["4"], ["5"], ["21"], ["3"]]),
    "passage_retrieval_en": (["Paragraph 3", "Paragraph 12", "It is 4 or 5", "", "Paragraph 30", "Paragraph 1, 1"],
                             [["Paragraph 3"], ["Paragraph 2"], ["Paragraph 5"], ["Paragraph 1"],
                              ["Paragraph 30"], ["Paragraph 1"]]),
    "lcc": (["    return x + y\n", "\n# comment\n    self.a = 1", "```python\nfoo()", "   \nbar()", "a = 1", ""],
            [["    return x + y"], ["    self.a = 1"], ["foo()"], ["bar()"], ["b = 2"], ["x"]]),
    "repobench-p": (["        if not path:\n", "// c\nint x = 0;", "return None", "\n\nprint(a)", "x", "import os"],
                    [["        if not path:"], ["int x = 0;"], ["return"], ["print(a, b)"], ["y"], ["import sys"]]),
}


def test_cases_cover_all_13_datasets():
    assert sorted(CASES) == sorted(official.LONGBENCH_E_DATASETS)
    assert len(official.LONGBENCH_E_DATASETS) == 13


def test_reference_rouge_l_is_lcs_f1_on_single_sentences():
    # With no periods and no repeated words, rouge's summary-level ROUGE-L is the plain LCS F1.
    def lcs(a, b):
        t = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(len(a)):
            for j in range(len(b)):
                t[i + 1][j + 1] = t[i][j] + 1 if a[i] == b[j] else max(t[i][j + 1], t[i + 1][j])
        return t[-1][-1]

    for hyp, ref in [("the cat sat on mat", "a cat sat on the mat"), ("x y z", "z y x w"), ("alpha beta", "gamma")]:
        a, b = hyp.split(), ref.split()
        l = lcs(a, b)
        want = 0.0 if l == 0 else 2 * (l / len(a)) * (l / len(b)) / (l / len(a) + l / len(b))
        assert ref_rouge_l(hyp, ref) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("dataset", sorted(CASES))
def test_bucket_means_equal_longbench_reference(dataset):
    preds, answers = CASES[dataset]
    all_classes = TREC if dataset == "trec" else None
    docs = [{"answers": a, "length": n, "all_classes": all_classes} for a, n in zip(answers, LENGTHS)]
    per = {}  # process_results' per-sample values, averaged per key as lm-eval's mean aggregation does
    for pred, doc in zip(preds, docs):
        for k, v in lb.process_results({**doc, "dataset": f"{dataset}_e"}, [pred]).items():
            per.setdefault(k, []).append(v)
    ours = {k: sum(v) / len(v) for k, v in per.items()}
    ref = ref_scorer_e(dataset, preds, answers, LENGTHS, all_classes)
    assert set(ours) == {"score"} | {f"score_{k}" for k in ref}
    for k, v in ref.items():
        assert ours[f"score_{k}"] == pytest.approx(v, abs=1e-12), (dataset, k)
    assert ours["score"] == pytest.approx(sum(v * 2 for v in ref.values()) / 6, abs=1e-12)


def test_fixed_predictions_are_not_trivial():
    # The parity test above would pass vacuously if every score were 0 or 1.
    scores = []
    for dataset, (preds, answers) in CASES.items():
        scores += list(ref_scorer_e(dataset, preds, answers, LENGTHS, TREC if dataset == "trec" else None).values())
    assert any(0 < s < 1 for s in scores) and any(s == 0 for s in scores) and any(s == 1 for s in scores)


def _lm_eval_shipped():
    import lm_eval.tasks

    path = Path(lm_eval.tasks.__file__).parent / "longbench" / "metrics.py"
    spec = importlib.util.spec_from_file_location("shipped_longbench_metrics_for_test", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_points_where_lm_evals_copy_departs_from_longbench():
    shipped = _lm_eval_shipped()
    # Code: LongBench takes the first line after leading newlines even if it is blank-looking spaces.
    doc = {"answers": ["bar()"], "all_classes": None}
    assert shipped.get_code_sim_score(doc, ["   \nbar()"])["code_sim_score"] == 1.0
    assert lb.score_prediction("lcc_e", "   \nbar()", ["bar()"], None) == ref_code_sim("   \nbar()", "bar()") < 1.0
    # Few-shot: LongBench strips leading newlines before taking the first line.
    assert lb.score_prediction("triviaqa_e", "\n\nLondon\nmore", ["London"], None) == 1.0


# LongBench's config/dataset2prompt.json (THUDM/LongBench), verbatim, for the six datasets whose prompt in lm-eval
# 0.4.13's shipped longbench_*_e files differs from it (a newline, a trailing space); pred.py fills them with
# str.format(**sample).
LONGBENCH_PROMPTS = {
    "triviaqa": "Answer the question based on the given passage. Only give me the answer and do not output any other "
                "words. The following are some examples.\n\n{context}\n\n{input}",
    "samsum": "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n"
              "{input}",
    "passage_count": "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please "
                     "carefully read these paragraphs and determine how many unique paragraphs there are after "
                     "removing duplicates. In other words, how many non-repeating paragraphs are there in total?\n\n"
                     "{context}\n\nPlease enter the final count of unique paragraphs after removing duplicates. The "
                     "output format should only contain the number, such as 1, 2, 3, and so on.\n\n"
                     "The final answer is: ",
    "passage_retrieval_en": "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which "
                            "paragraph the abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n"
                            "{input}\n\nPlease enter the number of the paragraph that the abstract is from. The "
                            "answer format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe answer is: ",
    "lcc": "Please complete the code given below. \n{context}Next line of code:\n",
    "repobench-p": "Please complete the code given below. \n{context}{input}Next line of code:\n",
}


def test_prompts_are_longbenchs_own(tmp_path):
    """The text each task sends is LongBench's prompt (``config/dataset2prompt.json`` of THUDM/LongBench, filled as
    its ``pred.py`` does), not lm-eval's copy: triviaqa and samsum joined context and question with one newline,
    passage_count / passage_retrieval_en lost the space after "is:", lcc / repobench-p the newline after "code:"."""
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval.tasks import tasks_path

    row = {"input": "Q: {x}?", "context": "line 1\n{y}\nline 2", "answers": ["a"], "length": 10,
           "all_classes": None, "_id": "0"}
    for ds in LONGBENCH_PROMPTS:
        _write(tmp_path / f"{ds}_e.jsonl", [{**row, "dataset": f"{ds}_e"}])
    names = [lb.task_of(ds) for ds in LONGBENCH_PROMPTS]
    tasks = TaskManager(include_path=str(tasks_path()), include_defaults=False,
                        metadata={"longbench_e_data_dir": str(tmp_path)}).load(names)["tasks"]
    for ds, prompt in LONGBENCH_PROMPTS.items():
        task = tasks[lb.task_of(ds)]
        doc = next(iter(task.test_docs()))
        assert task.fewshot_context(doc, num_fewshot=0) == prompt.format(**row), ds
        # --apply_chat_template: pred.py wraps every prompt in the chat template but trec, triviaqa, samsum, lsht, lcc
        # and repobench-p's ("chat models are better off without build prompts on these tasks")
        def chat(history, add_generation_prompt=True):
            return "<chat>" + "".join(m["content"] for m in history) + "</chat>"

        task.build_all_requests(limit=1, apply_chat_template=True, chat_template=chat, tokenizer_name="t")
        sent = task.instances[0].args[0]
        exempt = ds in ("trec", "triviaqa", "samsum", "lcc", "repobench-p")
        assert sent == (prompt.format(**row) if exempt else chat([{"content": prompt.format(**row)}])), ds
        assert ("--apply_chat_template" in task.dump_config().get(IGNORED_KEY, [])) == exempt, ds
    assert set(official.PROMPTS) == set(official.LONGBENCH_E_DATASETS)


def test_length_bucket_boundaries_and_bad_length():
    assert [lb.length_bucket(n) for n in (0, 3999, 4000, 7999, 8000)] == ["0_4k", "0_4k", "4_8k", "4_8k", "8k_plus"]
    for bad in (-1, "5000", None, True, float("nan")):
        with pytest.raises(ValueError, match="length="):
            lb.length_bucket(bad)
    with pytest.raises(ValueError, match="not one of the 13 LongBench-E datasets"):
        official.dataset_base_name("narrativeqa_e")


# ------------------------------------------------------------------ local loader


# ------------------------------------------------------------------ end to end through lm-eval's CLI


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))



def _run_cli(args, env_dir):
    env = dict(os.environ, TMPDIR=str(env_dir))  # conftest's offline HF_* and cache folders: the zygote's (forked)
    out = subprocess.run([sys.executable, "-m", "torchtune_longshort.eval", "run", *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    return out


@pytest.mark.slow
def test_longbench_e_full_end_to_end(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    spec = importlib.util.spec_from_file_location("lb_fixture", REPO / "tests/fixtures/longbench/build_longbench_e_fixture.py")
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    data = fixture.build(tmp_path / "data")
    (data / "lcc_e.jsonl").unlink()  # a missing data file: reported, and the other 12 datasets still score
    out = _run_cli([
        "--model", "longshort",
        "--model_args", f"checkpoint_dir={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},max_length=256,truncation=middle",
        "--tasks", "longshort_longbench_e",
        "--metadata", json.dumps({"longbench_e_data_dir": str(data)}),
        "--gen_kwargs", "max_gen_toks=6", "--output_path", str(tmp_path / "out"), "--log_samples",
    ], tmp_path)
    assert re.search(r"data file for lcc_e not found: \S*lcc_e.jsonl", out.stdout + out.stderr)
    res = json.load(open(glob.glob(str(tmp_path / "out" / "**" / "results_*.json"), recursive=True)[0]))["results"]
    assert res["longshort_longbench_lcc_e"]["missing_data,none"] == 1.0 and "score,none" not in res["longshort_longbench_lcc_e"]
    scored = [lb.task_of(d) for d in official.LONGBENCH_E_DATASETS if d != "lcc"]
    for name, task in zip([d for d in official.LONGBENCH_E_DATASETS if d != "lcc"], scored):
        # Recompute each bucket from the logged generations with the reference scorer.
        samples = [json.loads(l) for f in glob.glob(str(tmp_path / "out" / "**" / f"samples_{task}_*.jsonl"),
                                                     recursive=True) for l in open(f)]
        assert len(samples) == 3
        preds = [s["filtered_resps"][0] for s in samples]
        docs = [s["doc"] for s in samples]
        ref = ref_scorer_e(name, preds, [d["answers"] for d in docs], [d["length"] for d in docs],
                           docs[0]["all_classes"])
        assert set(ref) == {"0_4k", "4_8k", "8k_plus"}
        for k, v in ref.items():
            assert res[task][f"score_{k},none"] == pytest.approx(v, abs=1e-9), (task, k)
    top = res["longshort_longbench_e"]
    for key in ("score", "score_0_4k", "score_4_8k", "score_8k_plus"):
        assert top[f"{key},none"] == pytest.approx(sum(res[t][f"{key},none"] for t in scored) / 12, abs=1e-9)
