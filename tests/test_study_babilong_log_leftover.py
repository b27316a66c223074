"""A study SIGKILLed while its BABILong generation ran left ``babilong_data.attempt.log`` (the append to
``babilong_data.log`` never ran), and the next study's generation overwrote it: the output of the attempt that
ended with the study was lost. And ``babilong_data.log`` grew one section per generation, never trimmed. The next
generation now folds a left attempt log into the log first, under a line saying it ended without a word, and the
log keeps its last ``BABILONG_LOG_ATTEMPTS`` sections. The references: the left file's own text, and the sections
written, counted from the last."""

from __future__ import annotations

import os
import sys

from study_helpers import ROOT, FakeExecutor, quick_cpu_small

from torchtune_longshort.study import Study
from torchtune_longshort.study.run_configs import BABILONG_LOG_ATTEMPTS
from torchtune_longshort.study.stages import keep_attempt, run_command

LATER = "print('later-attempt: wrote 1k/qa1.jsonl')"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
GENERATOR = "torchtune_longshort.eval.tasks.babilong.generator"
LEFT = "$ python -m torchtune_longshort.eval.tasks.babilong.generator ...\nkilled-study: writing 1k/qa1.jsonl\n"


class _Generates(FakeExecutor):
    def __call__(self, argv, log_path, cwd, env, timeout):
        if list(argv[1:3]) == ["-m", GENERATOR]:
            super().__call__(argv, log_path, cwd, env, timeout)  # its files
            return run_command([sys.executable, "-c", LATER], log_path, cwd, ENV, timeout)
        return super().__call__(argv, log_path, cwd, env, timeout)


def test_an_attempt_log_a_killed_study_left_is_kept_before_the_next_generation(tmp_path):
    out = tmp_path / "q1"
    out.mkdir()
    (out / "babilong_data.log").write_text("--- attempt started 2026-12-01 10:00:00 ---\nearlier-attempt: done\n")
    (out / "babilong_data.attempt.log").write_text(LEFT)  # what the SIGKILLed study's generator had written
    cfg = quick_cpu_small()
    study = Study(cfg, output_dir=out, repo_root=ROOT, executor=_Generates(), log=lambda m: None)
    study._babilong_data()
    text = (out / "babilong_data.log").read_text()
    headers = [line for line in text.splitlines() if line.startswith("--- attempt ")]
    assert len(headers) == 3 and "ended without a word (the study was stopped while it ran)" in headers[1], text
    assert LEFT in text, text  # the left attempt's own text, whole
    assert text.index("earlier-attempt") < text.index("killed-study") < text.index("later-attempt"), text
    assert not (out / "babilong_data.attempt.log").exists()


def test_the_log_keeps_its_last_attempts(tmp_path):
    log, attempt = tmp_path / "babilong_data.log", tmp_path / "babilong_data.attempt.log"
    log.write_text("an older study's log, before its sections had headers\n")
    written = ["an older study's log, before its sections had headers"]
    for i in range(BABILONG_LOG_ATTEMPTS + 5):  # checked after each append: a trim to too few held on every other
        attempt.write_text(f"attempt-{i}: output\n")
        keep_attempt(attempt, log, 0.0, BABILONG_LOG_ATTEMPTS)
        written.append(f"attempt-{i}: output")
        text = log.read_text()
        assert [line for line in text.splitlines() if not line.startswith("--- attempt ")] == written[
            -BABILONG_LOG_ATTEMPTS:], (i, text)
    assert text.startswith("--- attempt started ")
