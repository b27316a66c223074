"""``jobs: 2``, the up-front BABILong generation failed: each run's evaluation tried ``_babilong_data()`` again, both at
once, into the same ``babilong_data.attempt.log`` (each opened it anew, one cut the other's output off, the first to
end appended and removed it under the other) and the same data folder. The generations now run one at a time (a lock
around the whole attempt): the study's log holds one whole section per attempt. The reference: what each stand-in
generator (a real child) printed, its start and end lines, found together in one section, and the children counted
while they run."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading

from study_helpers import ROOT, FakeExecutor, quick_cpu_small

from torchtune_longshort.study import Study
from torchtune_longshort.study.stages import run_command

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # a minimal env: the child starts at once
GENERATOR = "torchtune_longshort.eval.tasks.babilong.generator"
CHILD = ("import sys, time; print('start', sys.argv[1], flush=True); time.sleep(0.25); "
         "print('end', sys.argv[1], flush=True); sys.exit(1)")


class _FailingGenerator(FakeExecutor):
    """Every BABILong generation a real child that prints, waits, prints again and fails; the rest played."""

    def __init__(self):
        super().__init__()
        self.lock, self.now, self.most, self.ids = threading.Lock(), 0, 0, []

    def __call__(self, argv, log_path, cwd, env, timeout):
        if list(argv[1:3]) != ["-m", GENERATOR]:
            return super().__call__(argv, log_path, cwd, env, timeout)
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            ident = f"gen{len(self.ids)}"
            self.ids.append(ident)
        try:
            return run_command([sys.executable, "-c", CHILD, ident], log_path, cwd, ENV, timeout)
        finally:
            with self.lock:
                self.now -= 1


def test_the_runs_retry_the_failed_generation_one_at_a_time(tmp_path):
    cfg = quick_cpu_small()
    cfg = dataclasses.replace(cfg, jobs=2)
    executor = _FailingGenerator()
    study = Study(cfg, output_dir=tmp_path / "q1", repo_root=ROOT, executor=executor, log=lambda m: None)
    recs = study.run()
    runs = [k for k in recs if k != "base"]
    assert len(runs) == 2 and all((recs[k]["status"], recs[k]["stage"]) == ("failed", "babilong_data")
                                  for k in runs), recs
    assert len(executor.ids) == 3, executor.ids  # the runner's, then one per run's evaluation
    assert executor.most == 1, "generations ran at once"
    text = (tmp_path / "q1" / "babilong_data.log").read_text()
    sections = [s for s in text.split("--- attempt started ")[1:]]
    assert len(sections) == 3, text
    for ident in executor.ids:  # each child's own lines, whole, in one section
        assert sum(f"start {ident}\n" in s and f"end {ident}\n" in s for s in sections) == 1, text
    assert not (tmp_path / "q1" / "babilong_data.attempt.log").exists()
