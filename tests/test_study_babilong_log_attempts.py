"""A study whose BABILong generation was killed while one run evaluated (clex_a0_s0) generated it again for the
next run (jobs: 1), which overwrote ``babilong_data.log``: the study's last line, '... runs failed (clex_a0_s0);
logs: <out>/babilong_data.log', named a log that showed the later success, not the failure. Each attempt's output is
now appended to that log under a header line. The reference: what the killed child itself printed, and what the
later generation printed, both in the named log, in that order."""

from __future__ import annotations

import os
import sys

from study_helpers import CPU_SMALL, ROOT, FakeExecutor

import torchtune_longshort.study.__main__ as study_main
from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.stages import run_command

KILLED = "import os, signal; print('killed-attempt: writing 1k/qa1.jsonl', flush=True); os.kill(os.getpid(), 9)"
LATER = "print('later-attempt: wrote 1k/qa1.jsonl')"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # a minimal env: the child starts at once
GENERATOR = "torchtune_longshort.eval.tasks.babilong.generator"


class _KilledOnce(FakeExecutor):
    """The BABILong generator killed by SIGKILL the first time (a real child killing itself), fine the second."""

    def __call__(self, argv, log_path, cwd, env, timeout):
        if list(argv[1:3]) == ["-m", GENERATOR]:
            first = not any(list(a[1:3]) == ["-m", GENERATOR] for a in self.calls)
            self.calls.append(list(argv))
            if first:
                return run_command([sys.executable, "-c", KILLED], log_path, cwd, ENV, timeout)
            super().__call__(argv, log_path, cwd, env, timeout)  # its files
            return run_command([sys.executable, "-c", LATER], log_path, cwd, ENV, timeout)
        return super().__call__(argv, log_path, cwd, env, timeout)


def test_the_named_log_keeps_the_failed_generation_after_a_later_one(tmp_path, capsys):
    cfg = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
    study = Study(cfg, output_dir=tmp_path / "q1", repo_root=ROOT, executor=_KilledOnce(), log=lambda m: None)
    first, second = [r for r in study.runs() if r.key != "base"][:2]
    failed, ok = study.run_one(first.key, first), study.run_one(second.key, second)
    assert (failed["status"], failed["stage"]) == ("failed", "babilong_data"), failed
    assert ok["status"] == "ok", ok
    runs = {"base": {"status": "ok", "stage": None}, first.key: failed, second.key: ok}
    assert study_main._outcome(study, runs, None) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    named = tmp_path / "q1" / "babilong_data.log"
    assert last == f"[study] 1 of 3 runs failed ({first.key}); logs: {named}", last
    text = named.read_text()
    assert "killed-attempt: writing 1k/qa1.jsonl" in text, text  # the failure the line points at
    assert text.index("killed-attempt") < text.index("later-attempt: wrote 1k/qa1.jsonl"), text
    headers = [line for line in text.splitlines() if line.startswith("--- attempt started ")]
    assert len(headers) == 2, text
    assert not (tmp_path / "q1" / "babilong_data.attempt.log").exists()
