"""A run whose evaluation failed at ``babilong_data`` (the BABILong generator killed while it wrote) was pointed at by
the study's last line as '... runs failed (clex_a0_s0); logs: <out>/runs/clex_a0_s0/train.log', the run folder's
logs, where the generator's output is in the study's own ``babilong_data.log``. The last line now names the log of
the stage each run failed at. The reference: what the stage's executor wrote where it was handed its log
(appended to the study's log since)."""

from __future__ import annotations

import os
import sys

from study_helpers import CPU_SMALL, ROOT, FakeExecutor

import torchtune_longshort.study.__main__ as study_main
from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.stages import run_command

KILLED = "import os, signal; print('writing 1k/qa1.jsonl', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # a minimal env: the child starts at once
KEY = "clex_a0_s0"
GENERATOR = "torchtune_longshort.eval.tasks.babilong.generator"


class _KilledGenerator(FakeExecutor):
    """The BABILong generator killed by SIGKILL while it writes (a real child killing itself); the rest played."""

    def __init__(self):
        super().__init__()
        self.logs = {}

    def __call__(self, argv, log_path, cwd, env, timeout):
        if list(argv[1:3]) == ["-m", GENERATOR]:
            rc = run_command([sys.executable, "-c", KILLED], log_path, cwd, ENV, timeout)
            self.logs["babilong_data"] = log_path.read_text()  # what the killed stage wrote where it was handed
            return rc
        return super().__call__(argv, log_path, cwd, env, timeout)


def test_the_last_line_names_the_log_of_the_stage_that_failed(tmp_path, capsys):
    executor = _KilledGenerator()
    cfg = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
    study = Study(cfg, output_dir=tmp_path / "q1", repo_root=ROOT, executor=executor, log=lambda m: None)
    rec = study.run_one(KEY, next(r for r in study.runs() if r.key == KEY))
    assert (rec["status"], rec["stage"]) == ("failed", "babilong_data"), rec
    generator_log = tmp_path / "q1" / "babilong_data.log"  # each attempt's output, appended under a header
    assert "writing 1k/qa1.jsonl" in executor.logs["babilong_data"]
    assert executor.logs["babilong_data"] in generator_log.read_text()  # where the killed stage's output went
    runs = {"base": {"status": "ok", "stage": None},
            KEY: {"status": rec["status"], "stage": rec["stage"], "error": rec["error"]}}
    assert study_main._outcome(study, runs, None) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"[study] 1 of 2 runs failed ({KEY}); logs: {generator_log}", last
