"""A study refused by its pre-flight says so in one line on stderr. The pre-flight trains the study's tokenizer first
(a base pre-trained here), and the tiny configs' tokenizer said "Tokenizer: training ... into
/tmp/study_preflight_.../tokenizer ..." and "Tokenizer: trained in ... s: ..." there (training.bootstrap's ``_say``,
torchtune's logger) before the refusal: 3 stderr lines, naming a temporary folder that is gone. The training is now
quiet; the study's own log still says it trains. The component here says its lines through the bootstrap's own
``_say`` (the real one trains for seconds: torchtune's llama2 tokenizer is imported and sentencepiece run)."""

from __future__ import annotations

import logging
import sys
import types

from torchtune import utils as torchtune_utils
from user_modules import forget_user_module, write_user_module

import torchtune_longshort.study.__main__ as study_main
import torchtune_longshort.study.preflight as preflight

SOURCE = """
from pathlib import Path
from torchtune_longshort.training.bootstrap import _say
def train(path, **kwargs):
    _say(f"Tokenizer: training a SentencePiece BPE of 512 pieces on 120 standard-library files into {path} ...")
    Path(path).mkdir(parents=True, exist_ok=True)
    (Path(path) / "tokenizer.model").write_text("trained")
    _say(f"Tokenizer: trained in 0.1 s: {path}/tokenizer.model")
train.trains_missing_path = True
"""


class _Study:
    """A study whose base is pre-trained here (its tokenizer trained by the pre-flight) and whose perplexity length
    is past eval.max_length: refused by the pre-flight, with no run to train (no `tune` looked for)."""

    def __init__(self):
        ev = types.SimpleNamespace(lengths_of=lambda family: [512] if family == "ppl" else [], max_length=300,
                                   babilong=None, babilong_lengths=[], babilong_tokens=[], longbench_e_data_dir=None,
                                   metadata={})
        self.cfg = types.SimpleNamespace(eval=ev, base=types.SimpleNamespace(given=False))
        self.said = []

    def log(self, line):
        self.said.append(line)

    def runs(self):
        return []

    def task_metadata(self):
        return {"ppl_source": "stdlib_heldout", "ppl_num_samples": 1}

    def eval_tokenizer(self):
        return "/nonexistent/study/tokenizer"

    def recipe_config(self, key):
        return {"tokenizer": {"_component_": "quiet_tok.train", "path": "unused"}}


def test_a_study_refused_by_its_preflight_says_one_line_on_stderr(tmp_path, capfd, caplog, monkeypatch):
    caplog.set_level(logging.INFO)
    # the bootstrap's logger writing to stderr, as in the CLI's process (torchtune's get_logger adds that handler
    # where no logger above has one; under pytest the root's capture handler stands in for it)
    logger, handler = torchtune_utils.get_logger("INFO"), logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    try:
        _refused(tmp_path, capfd, caplog, monkeypatch)
    finally:
        logger.removeHandler(handler)


def _refused(tmp_path, capfd, caplog, monkeypatch):
    write_user_module(tmp_path / "mods", {"quiet_tok/__init__.py": SOURCE}, monkeypatch)
    forget_user_module("quiet_tok")
    loaded = []
    monkeypatch.setattr(preflight, "TaskTokenizer", lambda path, trust: loaded.append(path))  # the trained one
    study = _Study()
    assert study_main._train(study, None) == 2
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"{study_main.PROG}: error: study config:"), err
    assert "eval.ppl_lengths=[512]" in err[0] and "eval.max_length=300" in err[0]
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("Tokenizer:")] == []
    assert preflight.TOKENIZER_LOG == torchtune_utils.get_logger().name  # the logger the bootstrap's _say uses
    assert len(loaded) == 1 and loaded[0].endswith("tokenizer/tokenizer.model")  # it did train, and was loaded
    assert study.said[0].startswith("[study] pre-flight: training the study's tokenizer first (quiet_tok.train)")
    forget_user_module("quiet_tok")
