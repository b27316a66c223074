"""A stdlib eval source that holds text the evaluated step's run trained on is said, once, naming the run's dataset
keys and the source held out from it (the SmolLM2 configs read ``include_tests: False`` without ``split``, so
``stdlib_heldout`` shares their non-test files; the tiny configs' ``split: train`` shares none).

The reference is the selections' own file lists (``stdlib_source_files`` of each), not the overlap module."""

import json
import logging
import shutil

from omegaconf import OmegaConf

from torchtune_longshort.data.stdlib_corpus import STDLIB_SOURCES, stdlib_source_files
from torchtune_longshort.eval.tasks.common.long_text import texts_from_metadata

LOGGER = "torchtune_longshort.eval.tasks.common.long_text"


def _files(**selection):
    try:
        return set(stdlib_source_files(**selection))
    except FileNotFoundError:
        return set()


def _run_without_split(finished_run, tmp_path):
    """A copy of the real tiny run (step_1 and its recorded config) whose dataset had no ``split``, as SmolLM2's."""
    run = tmp_path / "run"
    shutil.copytree(finished_run / "step_1", run / "step_1")
    cfg = OmegaConf.load(finished_run / "torchtune_config.yaml")
    assert cfg.dataset.split == "train" and cfg.dataset.include_tests is False  # the run as recorded
    del cfg.dataset["split"]
    OmegaConf.save(cfg, run / "torchtune_config.yaml")
    return run


def _overlap_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and "overlaps the text" in r.getMessage()]


def test_heldout_on_a_run_without_split_is_said_once(tiny_finished_run, tmp_path, caplog):
    run = _run_without_split(tiny_finished_run, tmp_path)
    trained = _files(include_tests=False)
    read = _files(split="heldout")
    held_out = [n for n, args in STDLIB_SOURCES.items() if _files(**args) and not _files(**args) & trained]
    meta = {"pretrained": str(run / "step_1"), "ppl_source": "stdlib_heldout"}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        texts_from_metadata(meta, "ppl")
        texts_from_metadata(meta, "ppl")  # the next length: not said again
    lines = _overlap_lines(caplog)
    assert len(lines) == 1, lines
    line = lines[0]
    assert "ppl_source=stdlib_heldout" in line and "dataset.include_tests=False" in line
    assert "dataset.split unset" in line
    assert f"{len(read & trained)} of the {len(read)} files" in line
    assert all(f"ppl_source={n}" in line for n in held_out)
    assert "stdlib_heldout" not in held_out  # shares files with that run


def test_heldout_on_a_split_train_run_says_nothing(tiny_finished_run, caplog):
    assert not _files(split="heldout") & _files(include_tests=False, split="train")  # the reference: disjoint
    meta = {"checkpoint_dir": str(tiny_finished_run / "step_1"), "ppl_source": "stdlib_heldout"}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        texts_from_metadata(meta, "ppl")
    assert _overlap_lines(caplog) == []


def test_misalignment_cli_says_it_and_records_it(tiny_finished_run, tmp_path, capsys):
    from torchtune_longshort.metrics.cli import main

    run = _run_without_split(tiny_finished_run, tmp_path)
    out = tmp_path / "mis.json"
    assert main(["--checkpoint-dir", str(run / "step_1"), "--data", "stdlib_heldout", "--length", "32",
                 "--num-samples", "1", "--output", str(out)]) == 0
    err = [x for x in capsys.readouterr().err.splitlines() if "overlaps the text" in x]
    assert len(err) == 1 and "warning: --data=stdlib_heldout" in err[0]
    assert json.loads(out.read_text())["trained_text_overlap"] in err[0]


def test_results_record_it_and_the_report_shows_it(tiny_finished_run, tmp_path):
    """longshort-eval's record of a run (add_run_record, any --model) keeps the line of the task whose source
    overlaps (ppl's stdlib_heldout), not of one held out (misalignment's stdlib_tests), and the report says it."""
    from report_runs import lm_eval_run

    from torchtune_longshort.eval.report.build import build_report
    from torchtune_longshort.eval.run_record import add_run_record

    run = _run_without_split(tiny_finished_run, tmp_path)
    step = str(run / "step_1")
    trained = _files(include_tests=False)
    read = _files(split="heldout")
    results = {"config": {"model": "hf", "model_args": f"pretrained={step}", "provenance": {},
                          "checkpoint_fingerprint": "x"},
               "configs": {"longshort_ppl": {"task": "longshort_ppl",
                                             "metadata": {"pretrained": step, "ppl_source": "stdlib_heldout",
                                                          "mis_source": "stdlib_tests"}},
                           "longshort_misalignment": {"task": "longshort_misalignment",
                                                      "metadata": {"pretrained": step, "ppl_source": "stdlib_heldout",
                                                                   "mis_source": "stdlib_tests"}}}}
    add_run_record(results)
    lines = results["config"]["trained_text_overlap"]
    assert len(lines) == 1 and lines[0].startswith("ppl_source=stdlib_heldout overlaps")
    assert f"{len(read & trained)} of the {len(read)} files" in lines[0]

    d = lm_eval_run(tmp_path / "res", 20, pretrained=step, model="hf")
    f = next(d.glob("results_*.json"))
    data = json.loads(f.read_text())
    data["config"]["trained_text_overlap"] = lines
    f.write_text(json.dumps(data))
    build_report([d], tmp_path / "rep")
    assert lines[0] in (tmp_path / "rep" / "report.md").read_text()
