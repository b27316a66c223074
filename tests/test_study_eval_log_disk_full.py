"""A disk that filled while a study wrote a run's lm-eval log: the run's line said only '[study] clex_a0_s0: FAILED at
eval: [Errno 28] No space left on device' (the log's flush names no file), while the study's last line named the file.
The run's line (and its record) now says the disk is full, which file was being written, and what to do. The
reference: the kernel's own text for ENOSPC (os.strerror) and the run's eval.log path."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from study_helpers import ROOT, FakeExecutor, quick_cpu_small

from torchtune_longshort.study import Study

KEY = "clex_a0_s0"


class DiskFullAtEval(FakeExecutor):
    """The stand-in stages; lm-eval's log write raises ENOSPC with no file named, as a flush on a full disk does."""

    def __call__(self, argv, log_path, cwd, env, timeout):
        if list(map(str, argv[1:4])) == ["-m", "torchtune_longshort.eval", "run"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().__call__(argv, log_path, cwd, env, timeout)


def test_a_full_disk_at_eval_names_the_log_file_and_the_fix(tmp_path):
    out, said = tmp_path / "out", []
    cfg = quick_cpu_small()
    study = Study(cfg, output_dir=out, repo_root=ROOT, executor=DiskFullAtEval(), log=said.append)
    run = next(r for r in study.runs() if r.key == KEY)
    ckpt = out / "runs" / KEY / "train" / "step_1"  # trained: the recipe's config (torchtune, seconds) is not read
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    study._train = lambda key, run, config=None: (ckpt, False)
    study.run_one(KEY, run, evaluate=True)
    line = next(x for x in said if "FAILED" in x)
    log = out / "runs" / KEY / "eval.log"
    assert line.startswith(f"[study] {KEY}: FAILED at eval: "), line
    assert f"writing {log}" in line, line
    assert f"[Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}" in line, line
    assert "free space there" in line and "run again" in line, line
    rec = json.loads(Path(out / "runs" / KEY / "result.json").read_text())
    assert rec["stage"] == "eval" and f"writing {log}" in rec["error"], rec["error"]
