"""Data from a torchtune dataset builder (``torchtune.datasets.text_completion_dataset`` on local JSON), read as a
careful user would break it: an empty file, torn JSON and JSON lines, a missing column, and one bad record late in the
file. Each is refused with the file and line (or record) named: the first four before any output folder exists, the
late one at the step that reads it, after saving the last good step, from which the run resumes exactly once the
record is mended."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from recipe_config import make_cfg, train_until_fault

TEXT_COMPLETION = "torchtune.datasets.text_completion_dataset"


def _record(i: int) -> dict:
    return {"text": "".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n" for j in range(12))}


def _node(path: Path) -> dict:
    return {"_component_": TEXT_COMPLETION, "source": "json", "data_files": str(path), "column": "text",
            "split": "train"}


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


def _cfg(tmp_path, ckpt, tok, data: Path, name="out", **over):
    base = {"max_steps": 8, "save_every_n_steps": 100, "batch_size": 2, "dataset": _node(data)}
    return make_cfg(ckpt, tok, tmp_path / name, **{**base, **over})


def _losses(out: Path):
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def _refused_before_output(recipe_cls, cfg, match):
    from torchtune_longshort.data.text_files import DataRecordError

    with pytest.raises((DataRecordError, ValueError), match=match):
        recipe_cls(cfg).setup()
    assert not Path(cfg.output_dir).exists()


def test_empty_file_is_refused_before_anything(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    data = tmp_path / "empty.jsonl"
    data.write_text("")
    _refused_before_output(recipe_cls, _cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data),
                           r"dataset.data_files: .*empty.jsonl holds no records")


def test_torn_json_is_named_with_file_and_line(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    data = tmp_path / "torn.json"
    data.write_text("[\n" + json.dumps(_record(0)) + ",\n" + '{"text": "cut' + "\n")
    _refused_before_output(recipe_cls, _cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data),
                           r"torn.json:3: not JSON")


def test_torn_json_line_is_named_with_file_and_line(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    data = tmp_path / "torn.jsonl"
    data.write_text(json.dumps(_record(0)) + "\n" + '{"text": \n' + json.dumps(_record(1)) + "\n")
    _refused_before_output(recipe_cls, _cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data),
                           r"torn.jsonl:2: not a JSON line")


def test_missing_column_is_named_with_file_and_line(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    data = tmp_path / "body.jsonl"
    data.write_text("".join(json.dumps({"body": _record(i)["text"]}) + "\n" for i in range(3)))
    _refused_before_output(recipe_cls, _cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data),
                           r"body.jsonl:1: no text field 'text'.*\['body'\]")


def test_late_bad_record_saves_the_last_good_step_and_resumes_exactly(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                      sp_tokenizer_dir):
    from torchtune_longshort.data.text_files import DataRecordError

    good = [json.dumps(_record(i)) + "\n" for i in range(40)]
    bad_line = 4  # a record is about 270 tokens, a step about 160: read at about step 5 of 8
    broken = good[: bad_line - 1] + [json.dumps({"body": "no text here"}) + "\n"] + good[bad_line:]
    data = tmp_path / "late.jsonl"
    data.write_text("".join(broken))
    run = recipe_cls(_cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data))
    run.setup()
    stopped = train_until_fault(run, DataRecordError, rf"late.jsonl:{bad_line}: no text field 'text'.*\['body'\].*"
                                r"The last good step is saved: .*step_(\d+).*resume=True", tmp_path / "out")
    assert 2 <= stopped < 8

    data.write_text("".join(good))  # mended
    reference = tmp_path / "reference.jsonl"
    reference.write_text("".join(good))
    ref = recipe_cls(_cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, reference, name="ref"))
    ref.setup()
    ref.train()
    ref.cleanup()
    resumed = recipe_cls(_cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data, resume=True))
    resumed.setup()
    resumed.train()
    resumed.cleanup()
    assert _losses(tmp_path / "out") == _losses(tmp_path / "ref")


def test_a_bad_record_in_the_first_step_says_how_to_start_again(recipe_cls, tmp_path, tiny_llama2_dir,
                                                               sp_tokenizer_dir):
    """A bad record read before any step finished: nothing to resume from, and the folder holds the run's start, so
    'start again' alone was refused ('exists and is not empty'); the message now names overwrite_output_dir=True,
    and that rerun, the record mended, trains."""
    from torchtune_longshort.data.text_files import DataRecordError

    good = [json.dumps(_record(i)) + "\n" for i in range(40)]
    data = tmp_path / "early.jsonl"
    data.write_text(good[0] + json.dumps({"body": "no text here"}) + "\n" + "".join(good[2:]))
    # the first sample (checked at setup) fits the first record; step 1's batch of 4 does not
    run = recipe_cls(_cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data, max_steps=2, batch_size=4))
    run.setup()
    with pytest.raises(DataRecordError, match=r"early.jsonl:2: .*No step had finished: no checkpoint saved; mend the "
                                              r"record \(or skip it: dataset.skip_bad_records=True\), then start "
                                              r"the run again with overwrite_output_dir=True"):
        run.train()
    run.release_output_dir()
    data.write_text("".join(good))
    again = recipe_cls(_cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data, max_steps=2, batch_size=4,
                            overwrite_output_dir=True))
    again.setup()
    again.train()
    again.cleanup()
    assert [s for s, _ in _losses(tmp_path / "out")] == [1, 2]


def test_a_run_stopped_at_a_bad_record_resumes_skipping_it(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
                                                           capsys):
    """A record nobody can mend (a hub dataset's): the stopped run resumes with dataset.skip_bad_records=True, skips
    it (its place kept, no tokens) and trains to the losses of a run on the data without it; the skip is printed and
    logged. Resumed with skipping off again, the run is refused: its data position counts the skipped record."""
    good = [json.dumps(_record(i)) + "\n" for i in range(40)]
    data = tmp_path / "late.jsonl"
    data.write_text("".join(good[:3] + [json.dumps({"body": "no text here"}) + "\n"] + good[4:]))
    run = recipe_cls(_cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data))
    run.setup()
    with pytest.raises(Exception, match=r"late.jsonl:4: no text field"):
        run.train()
    run.release_output_dir()
    skipping = {**_node(data), "skip_bad_records": True}
    past_it = run.global_step + 1  # the step that reads the record; then a resume after the skip
    for stop in (past_it, None):
        resumed = recipe_cls(_cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data, resume=True, dataset=skipping,
                                  stop_after_step=stop))
        resumed.setup()
        resumed.train()
        resumed.cleanup()
    out = capsys.readouterr().out
    assert re.search(r"step \d: skipped 1 unreadable record \(dataset.skip_bad_records=True; 1 in this run\): "
                     r".*late.jsonl:4: no text field", out)
    rows = [json.loads(l) for l in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 8 and rows[-1]["records_skipped"] == 1

    without = tmp_path / "without.jsonl"
    without.write_text("".join(good[:3] + good[4:]))
    ref = recipe_cls(_cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, without, name="ref"))
    ref.setup()
    ref.train()
    ref.cleanup()
    assert _losses(tmp_path / "out") == _losses(tmp_path / "ref")

    cfg = _cfg(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, data, resume=True, max_steps=9)
    with pytest.raises(ValueError, match=r"resume=True with dataset.skip_bad_records=False: the run skipped 1 "
                                         r"unreadable record before step 8 .*resume with "
                                         r"dataset.skip_bad_records=True"):
        recipe_cls(cfg).setup()


def test_skip_bad_records_on_a_source_without_records_is_refused(tmp_path):
    from omegaconf import OmegaConf

    from torchtune_longshort.training.recipe_config.data import DataSourceConfig
    from torchtune_longshort.config.fields import build_section

    node = OmegaConf.create({"_component_": "torchtune_longshort.data.corpus.stdlib", "skip_bad_records": True})
    with pytest.raises(ValueError, match=r"dataset.skip_bad_records is not accepted by "
                                         r"torchtune_longshort.data.corpus.stdlib: .*remove the key"):
        build_section(DataSourceConfig, OmegaConf.to_container(node), "dataset")
