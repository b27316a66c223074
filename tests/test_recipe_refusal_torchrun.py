"""A refusal of the recipe under torchrun: it reaches the agent's report (a worker stopped names its stop there),
tune run with two processes prints it once, a refusal recorded for torchrun is whole when a stop arrives while it is
written, and an empty WORLD_SIZE or RANK reads as unset. Split from test_recipe_bad_input.py."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_refusal_under_torchrun_reaches_its_agent_report(tmp_path, monkeypatch, capsys, rank):
    # Under torchrun every worker refuses: the first to refuse prints the line (whatever its rank: rank 0 printed
    # before, and a rank 0 slower than rank 1 was stopped by the agent before it printed, so no line came out), and
    # each writes it where torch's elastic agent reads a worker's failure; torch's own reader and report format are
    # the reference.
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from torchtune_longshort.refusals import refusal

    attempt = tmp_path / "attempt_0"  # the agent's layout: <attempt>/<local rank>/error.json
    error_file, other = attempt / rank / "error.json", attempt / str(1 - int(rank)) / "error.json"
    error_file.parent.mkdir(parents=True), other.parent.mkdir()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r1")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.setenv("RANK", rank)
    assert refusal("longshort_finetune", "seq_len=0:\n must be positive") == 2
    line = "longshort_finetune: error: seq_len=0: must be positive"
    assert capsys.readouterr().err == line + "\n"
    failure = ProcessFailure(local_rank=int(rank), pid=1, exitcode=2, error_file=str(error_file))
    assert failure.message["message"] == line
    report = ChildFailedError("longshort_finetune", {int(rank): failure}).format_msg()
    assert f"traceback : {line}" in report and "To enable traceback" not in report, report
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(other))  # the other worker refuses second: it does not print
    monkeypatch.setenv("RANK", str(1 - int(rank)))
    assert refusal("longshort_finetune", "seq_len=0: must be positive") == 2
    assert capsys.readouterr().err == "" and ProcessFailure(0, 1, 2, str(other)).message["message"] == line
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")  # a RANK without torchrun (another launcher): every rank prints
    error_file.unlink()
    refusal("longshort_finetune", "seq_len=0: must be positive")
    assert capsys.readouterr().err == line + "\n" and not error_file.exists()


def test_a_worker_stopped_under_torchrun_names_its_stop_in_the_agent_report(tmp_path, monkeypatch, capsys):
    # The agent stops the other workers when one refuses; a worker still setting up ended in one line, exit 143,
    # and torchrun's report said "error_file: <N/A> ... To enable traceback see ..." for it (CI, 2026-12-04)
    import signal

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from torchtune_longshort.refusals import Stopped, stoppable

    error_file = tmp_path / "attempt_0" / "1" / "error.json"
    error_file.parent.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r1")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))

    def setting_up():
        raise Stopped(signal.SIGTERM)

    with pytest.raises(SystemExit) as e:
        stoppable("longshort_finetune", setting_up, "stopped while setting up")
    line = "longshort_finetune: interrupted (SIGTERM): stopped while setting up"
    assert e.value.code == 143 and capsys.readouterr().err == line + "\n"
    failure = ProcessFailure(local_rank=1, pid=1, exitcode=143, error_file=str(error_file))
    report = ChildFailedError("longshort_finetune", {1: failure}).format_msg()
    assert f"traceback : {line}" in report and "To enable traceback" not in report, report
    # a second worker of the attempt stopped too (Ctrl-C reaches every worker): its line goes to its error file only,
    # so the terminal shows one (it showed one a worker)
    other = tmp_path / "attempt_0" / "0" / "error.json"
    other.parent.mkdir()
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(other))
    with pytest.raises(SystemExit):
        stoppable("longshort_finetune", setting_up, "stopped while setting up")
    assert capsys.readouterr().err == "" and line in other.read_text()
    # the agent stopped the workers because one refused (that worker printed its refusal): none prints a stop
    attempt = tmp_path / "attempt_1"
    for rank in ("0", "1"):
        (attempt / rank).mkdir(parents=True)
    (attempt / "refused").touch()
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(attempt / "1" / "error.json"))
    with pytest.raises(SystemExit):
        stoppable("longshort_finetune", setting_up, "stopped while setting up")
    assert capsys.readouterr().err == "" and line in (attempt / "1" / "error.json").read_text()
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")  # outside torchrun: the line only
    error_file.unlink()
    with pytest.raises(SystemExit):
        stoppable("longshort_finetune", setting_up, "stopped while setting up")
    assert capsys.readouterr().err == line + "\n" and not error_file.exists()


@pytest.mark.slow
def test_tune_run_two_processes_prints_a_refusal_once(tmp_path):
    # `tune run --nproc_per_node 2` with a typo: each worker printed the refusal and torchrun's report said
    # "error_file: <N/A> ... To enable traceback see ..." for both; now one line, and the report names it per rank.
    import subprocess
    import sys

    from warm_start import with_warm_start

    env = dict(__import__("os").environ, PYTHONPATH=with_warm_start(str(REPO)), OMP_NUM_THREADS="1",
               TMPDIR=str(tmp_path))
    tune = str(Path(sys.executable).with_name("tune"))
    p = subprocess.run([tune, "run", "--nproc_per_node", "2", "recipes/longshort_finetune.py", "--config",
                        "configs/tiny/longshort_stdlib.yaml", "max_step=3", f"output_dir={tmp_path / 'out'}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and not (tmp_path / "out").exists(), out
    printed = [ln for ln in out.splitlines() if ln.startswith("longshort_finetune: error:")]
    assert len(printed) == 1 and "'max_step' (did you mean 'max_steps'?)" in printed[0], out
    # a worker the agent stopped then prints no "interrupted" line of its own: nobody interrupted the command
    assert not [ln for ln in out.splitlines() if ln.startswith("longshort_finetune: interrupted")], out
    # each worker is named with its line: its refusal, or the stop of one the agent stopped while it set up
    assert 1 <= out.count(f"traceback : {printed[0]}") <= 2 and "To enable traceback" not in out, out


def test_a_refusal_recorded_for_torchrun_is_whole_when_a_stop_arrives_while_it_is_written(tmp_path, monkeypatch):
    """torchrun's agent stops the other workers once one fails: a worker stopped between `open` and the write of
    its error file left it empty, and the agent's report printed a JSONDecodeError traceback (seen once in CI, in
    test_tune_run_two_processes_prints_a_refusal_once). A SIGTERM arriving mid-write now waits for the file."""
    import json
    import os
    import signal

    import torchtune_longshort.refusals as refusals

    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop()

    real_dump = json.dump

    def dump_stopped_midway(obj, f):
        f.write("{")
        os.kill(os.getpid(), signal.SIGTERM)  # as the agent stops this worker
        f.write(json.dumps(obj)[1:])

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        monkeypatch.setattr(refusals.json, "dump", dump_stopped_midway)
        path = tmp_path / "error.json"
        with pytest.raises(Stop):  # the stop still comes, after the file
            refusals.record_for_torchrun(str(path), "prog: error: bad key")
    finally:
        signal.signal(signal.SIGTERM, previous)
        monkeypatch.setattr(refusals.json, "dump", real_dump)
    data = json.loads(path.read_text())
    assert data["message"]["message"] == "prog: error: bad key" and list(tmp_path.iterdir()) == [path]


def test_an_empty_world_size_or_rank_reads_as_unset(monkeypatch, capsys):
    """``WORLD_SIZE=`` / ``RANK=`` (set empty, as ``WORLD_SIZE=$UNSET`` does) read as unset by every reader
    (0c98753: torchtune_longshort/launcher.py, the one reader): longshort-validate's --nproc_per_node default ended
    in ``ValueError: invalid literal for int()`` before it read its config. The reference: the variables unset."""
    from torchtune_longshort.launcher import launched_rank, launched_world_size
    from torchtune_longshort.training.recipe_config.validate import main

    def seen():
        with pytest.raises(SystemExit) as refused:  # the config is not there: one line, exit 2
            main(["no_such_config.yaml"])
        return launched_world_size(), launched_rank(), refused.value.code, capsys.readouterr().err

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    unset = seen()
    monkeypatch.setenv("WORLD_SIZE", "")
    monkeypatch.setenv("RANK", "")
    assert seen() == unset
    assert unset[:3] == (1, 0, 2) and "no_such_config.yaml" in unset[3], unset
