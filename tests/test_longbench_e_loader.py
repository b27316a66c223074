"""LongBench-E's local loader: it reads LongBench's jsonl and checks its fields, reports a missing file (not fatal),
leaves a sample whose context or input is no text unscored, and names an empty data file. Split from
test_longbench_e.py."""

from __future__ import annotations

import json
import re

import pytest
from test_longbench_e import _write

from torchtune_longshort.eval.tasks.longbench_e import task as lb


def test_loader_reads_longbench_jsonl_and_checks_fields(tmp_path):
    row = {"input": "Q?", "context": "c", "answers": ["a"], "length": 12, "dataset": "qasper", "all_classes": None, "_id": "1"}
    _write(tmp_path / "qasper_e.jsonl", [row, {**row, "length": 9000}])
    ds = lb.load_longbench_e("qasper_e", str(tmp_path))["test"]
    assert len(ds) == 2 and ds[0]["question"] == "Q?" and ds[1]["length"] == 9000
    # the buckets in turn (lm-eval's --limit 3 keeps every bucket; the file's order kept inside one)
    lengths = [100, 200, 300, 5000, 6000, 9000, 9500]
    _write(tmp_path / "samsum_e.jsonl", [{**row, "dataset": "samsum", "length": n} for n in lengths])
    assert lb.load_longbench_e("samsum_e", str(tmp_path))["test"]["length"] == [100, 5000, 9000, 200, 6000,
                                                                                       9500, 300]

    # each bad file is named (and its sample or line): raised with longbench_e_missing=error, else the dataset scores
    # no number and carries the reason, and the run goes on (a bad line ended the run with datasets' traceback; a
    # string answers was scored one answer per character: 'P' 1.0, 'Paris' 0.0; a null dataset an AttributeError)
    cases = [("hotpotqa", [{k: v for k, v in row.items() if k != "answers"}], r"lacks field\(s\) \['answers'\]"),
             ("trec", [row], r"field 'dataset' is \['qasper'\], expected 'trec'"),
             ("trec", [{**row, "dataset": None}], r"field 'dataset' is \[None\], expected 'trec'"),
             ("lcc", [{**row, "dataset": "lcc_e", "length": -3}], "lcc_e.jsonl:1: length=-3")]
    cases += [("2wikimqa", [{**row, "dataset": "2wikimqa"}, {**row, "dataset": "2wikimqa", "answers": answers}],
               r"2wikimqa_e.jsonl:2: field 'answers' is .*, expected a non-empty")
              for answers in ["Paris", None, [], [3]]]
    for name, rows, match in cases:
        _write(tmp_path / f"{name}_e.jsonl", rows)
        with pytest.raises(ValueError, match=match):
            lb.load_longbench_e(f"{name}_e", str(tmp_path), longbench_e_missing="error")
        placeholder = lb.load_longbench_e(f"{name}_e", str(tmp_path))["test"]
        assert len(placeholder) == 1 and re.search(match, lb.reason_of(placeholder[0]))
    (tmp_path / "samsum_e.jsonl").write_text(json.dumps({**row, "dataset": "samsum"}) + "\nnot json\n")
    with pytest.raises(ValueError, match=r"samsum_e.jsonl:2: not a JSON line"):
        lb.load_longbench_e("samsum_e", str(tmp_path), longbench_e_missing="error")


def test_loader_missing_file_is_reported_not_fatal(tmp_path):
    ds = lb.load_longbench_e("samsum_e", str(tmp_path))["test"]
    assert len(ds) == 1
    assert lb.process_results(ds[0], ["anything"]) == {"missing_data": 1.0, "error": ds[0][lb.MISSING_DATA_FIELD]}
    assert "samsum_e.jsonl" in ds[0][lb.MISSING_DATA_FIELD]
    with pytest.raises(FileNotFoundError, match="samsum_e.jsonl"):
        lb.load_longbench_e("samsum_e", str(tmp_path), longbench_e_missing="error")


def test_a_sample_whose_context_or_input_is_no_text_is_not_scored(tmp_path):
    """pyarrow fills a key missing from one line, or a null, with None, and the prompt held the word "None" as the
    context; the file's data count as missing, named by file:line (the line counted here, blank lines included)."""
    row = {"input": "Q?", "context": "c", "answers": ["a"], "length": 12, "all_classes": None, "_id": "1"}
    no_context = {k: v for k, v in row.items() if k != "context"}
    cases = [("multifieldqa_en", [row, {**row, "context": None}], "'context' is missing or null (1 of 2 samples)"),
             ("lcc", [row, row, no_context, no_context], "'context' is missing or null (2 of 4 samples)"),
             ("qasper", [{**row, "input": None}, row], "'input' is missing or null (1 of 2 samples)")]
    for name, rows, why in cases:
        path = tmp_path / f"{name}_e.jsonl"
        path.write_text(json.dumps(rows[0]) + "\n\n" + "".join(json.dumps(r) + "\n" for r in rows[1:]))
        line = next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                    if text and not all(isinstance(json.loads(text).get(k), str) for k in ("input", "context")))
        want = f"{path}:{line}: field {why}"
        with pytest.raises(ValueError, match=re.escape(want)):
            lb.load_longbench_e(f"{name}_e", str(tmp_path), longbench_e_missing="error")
        ds = lb.load_longbench_e(f"{name}_e", str(tmp_path))["test"]
        assert len(ds) == 1 and want in lb.reason_of(ds[0]), lb.reason_of(ds[0])
        assert "None" not in ds[0]["context"] and lb.process_results(ds[0], ["a"])["missing_data"] == 1.0
        path.write_text("".join(json.dumps(r) + "\n" for r in rows if r is row))  # the same file without them
        assert lb.load_longbench_e(f"{name}_e", str(tmp_path))["test"]["context"] == ["c"] * rows.count(row)
    # a number or a list where the text goes (pyarrow refuses a list among strings: its bare ValueError was said)
    for bad, said in ((5, "5"), (["c"], r"\['c'\]")):
        _write(tmp_path / "samsum_e.jsonl", [row, {**row, "input": bad}])
        with pytest.raises(ValueError, match=rf"samsum_e.jsonl(: line |:)2: field 'input' is {said}"):
            lb.load_longbench_e("samsum_e", str(tmp_path), longbench_e_missing="error")
    # hub data (no lines): the sample's index, the mirror's field name 'question'
    hub = pytest.importorskip("datasets").Dataset.from_list([{**row, "question": "Q?"}, {**row, "question": None}])
    with pytest.raises(ValueError, match=r"mirror:x_e, sample 1: field 'question' is missing or null"):
        lb._with_longbench_fields(hub.remove_columns("input"), "mirror:x_e", "qasper", "qasper_e")


@pytest.mark.parametrize("content", [b"", b"\n  \n"])
def test_an_empty_data_file_is_named_empty(tmp_path, content):
    # datasets raised StopIteration on a 0-byte file: "samsum_e.jsonl: StopIteration; LongBench's files hold ..."
    (tmp_path / "samsum_e.jsonl").write_bytes(content)
    with pytest.raises(ValueError, match=r"samsum_e.jsonl is empty \(no rows\)") as err:
        lb.load_longbench_e("samsum_e", str(tmp_path), longbench_e_missing="error")
    assert "StopIteration" not in str(err.value) and "corresponds to no data" not in str(err.value)
    ds = lb.load_longbench_e("samsum_e", str(tmp_path))["test"]
    assert len(ds) == 1 and "samsum_e.jsonl is empty (no rows)" in lb.reason_of(ds[0])


def test_a_line_that_is_not_utf8_is_named_and_the_run_goes_on(tmp_path):
    """A byte that is no UTF-8 in one line: pyarrow's JSON reader keeps the string unchecked, and reading it ended the
    whole run ('longshort-eval: error: 'utf-8' codec can't decode byte 0xff ...', exit 2, no file named). The
    reference: Python's own strict decode of the same line fails, of the other lines passes."""
    row = {"input": "Q?", "context": "Paris is the capital", "answers": ["a"], "length": 12, "all_classes": None,
           "_id": "1"}
    lines = [json.dumps(row).encode() for _ in range(3)]
    lines[1] = lines[1].replace(b"Paris", b"Par\xffis")
    with pytest.raises(UnicodeDecodeError):
        lines[1].decode("utf-8")
    assert [line.decode("utf-8") for line in (lines[0], lines[2])]
    (tmp_path / "trec_e.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    match = r"trec_e.jsonl:2: not UTF-8 \(invalid start byte: byte b'\\xff' at column \d+\)"
    with pytest.raises(ValueError, match=match):
        lb.load_longbench_e("trec_e", str(tmp_path), longbench_e_missing="error")
    placeholder = lb.load_longbench_e("trec_e", str(tmp_path))["test"]
    assert len(placeholder) == 1 and re.search(match, lb.reason_of(placeholder[0]))
    assert lb.process_results(placeholder[0], ["x"])["missing_data"] == 1.0


def test_an_empty_context_is_scored_and_said_in_one_warning(tmp_path, caplog):
    """A sample whose context is empty (or blank) was scored on its question alone without a word; it still is (the
    other samples scored with it), and one warning names its file:line and the count. The reference: the lines
    written, counted here (a blank line between them, which datasets skips)."""
    row = {"input": "Q?", "context": "Paris is the capital", "answers": ["a"], "length": 12, "all_classes": None,
           "_id": "1"}
    text = "\n".join([json.dumps(row), "", json.dumps({**row, "context": " \n"}), json.dumps({**row, "context": ""})])
    (tmp_path / "hotpotqa_e.jsonl").write_text(text + "\n")
    with caplog.at_level("WARNING", logger=lb.log.name):
        ds = lb.load_longbench_e("hotpotqa_e", str(tmp_path))["test"]
    assert len(ds) == 3 and not any(lb.reason_of(r) for r in ds)
    said = [r.getMessage() for r in caplog.records if "context" in r.getMessage()]
    assert said == [f"LongBench-E data {tmp_path / 'hotpotqa_e.jsonl'}:3: field 'context' is empty (2 of 3 samples): "
                    "scored on the question alone; LongBench's samples each hold the text they ask about"], said
