"""The recipe's SIGTERM / SIGINT handling (``training.stop_signals``) when one stop arrives twice.

torchrun's launcher forwards the signal it gets to every worker; a scheduler that signals every process of a job
(SLURM at its time limit, ``scancel``) has already sent the workers the same one. Reference: what the README says a
signal does (the step finishes, ``step_<k>`` is saved); before, the second delivery raised KeyboardInterrupt in
every worker, which died in its collective with no checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from test_recipe import CFG, REPO, _env, losses, tune_cmd

from torchtune_longshort.refusals import Stopped
from torchtune_longshort.training.stop_signals import REPEAT_WINDOW_S, StopSignals


@pytest.fixture
def restored_handlers():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in before.items():
        signal.signal(s, h)


def test_the_same_stop_delivered_twice_is_one_stop(restored_handlers):
    stops = StopSignals()
    stops.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's
        os.kill(os.getpid(), signal.SIGTERM)  # the launcher's, forwarded (a KeyboardInterrupt here before)
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        pytest.fail("a stop delivered twice stopped at once, unsaved")
    assert stops.signum == signal.SIGTERM


def test_a_signal_after_the_window_stops_at_once(restored_handlers, capfd):
    # the first Ctrl-C printed nothing (a large model's step takes minutes: it was pressed again, and the second ended
    # in a KeyboardInterrupt traceback); it says at once which step it saves, the second is a Stopped the recipe ends
    # in one line (test_a_second_ctrl_c_stops_at_once_in_one_line)
    now = [100.0]
    stops = StopSignals(step=lambda: 7, clock=lambda: now[0])
    stops.install()
    os.kill(os.getpid(), signal.SIGINT)
    assert capfd.readouterr().err == ("SIGINT: finishing step 7, then saving it; press Ctrl-C again to stop now "
                                      "without saving it\n")
    now[0] += REPEAT_WINDOW_S + 0.5  # a person asking again
    with pytest.raises(Stopped) as stop:
        os.kill(os.getpid(), signal.SIGINT)
    assert stops.signum == signal.SIGINT and stop.value.signum == signal.SIGINT
    assert capfd.readouterr().err == ""
    assert StopSignals.announcement(signal.SIGTERM, 3).startswith("SIGTERM: finishing step 3, then saving it; another")


@pytest.mark.parametrize("ranks", [(0, 0), (signal.SIGINT, 0), (0, signal.SIGTERM), (signal.SIGINT, signal.SIGTERM),
                                   (signal.SIGTERM, signal.SIGTERM, signal.SIGINT)])
def test_the_flags_summed_over_ranks_give_the_max_signal(ranks):
    """The step's one all-reduce sums each rank's :meth:`StopSignals.flags`; reference: the MAX all-reduce of the
    signal numbers (what :meth:`StopSignals.received` does, and the recipe did every step)."""
    per_rank = []
    for signum in ranks:
        stops = StopSignals()
        stops.signum = signum
        per_rank.append(stops.flags())
    assert StopSignals.first_of([sum(col) for col in zip(*per_rank)]) == max(ranks)


def _tree(pid: int) -> list:
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid] + [q for k in kids for q in _tree(int(k))]


@pytest.mark.slow
def test_sigterm_to_every_process_of_a_torchrun_job_saves(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """SIGTERM to the launcher and each worker, as SLURM sends it: the workers finish the step and save it."""
    out = tmp_path / "out"
    cmd = tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "max_steps=200", "save_every_n_steps=100",
                   "validation=null", nproc=2)
    # the launcher fresh (its workers are its children, signalled one by one); the workers forked from the warm
    # zygote: each one's relay, a child of the launcher, passes the SIGTERMs on (the test's and the launcher's)
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(tmp_path, LONGSHORT_TEST_FRESH="self"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 240
        while not ((out / "metrics.jsonl").is_file() and any(s >= 2 for s, _ in losses(out))):
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:] if proc.poll() else ""
            time.sleep(0.05)
        for pid in _tree(proc.pid):  # the launcher first, then its workers
            os.kill(pid, signal.SIGTERM)
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    last = losses(out)[-1][0]
    assert "KeyboardInterrupt" not in text, text[-3000:]
    assert "SIGTERM received" in text and (out / "recipe_state" / f"step_{last}.pt").is_file(), text[-3000:]
    assert (out / "latest").read_text().strip() == f"step_{last}"


def test_a_run_stopped_in_its_setup_leaves_a_folder_its_rerun_takes(tmp_path):
    """A run killed (a scheduler's SIGTERM or SIGKILL) once it has claimed its output_dir, before its handlers and
    its first save (a 7B model loads for a minute there): the folder keeps the run's marker, its lock and an empty
    staging folder. The plain rerun was refused ('exists and is not empty ... Pass resume=True'), and resume=True had
    nothing to resume; the rerun now takes the folder. The state is made by a real process that claims the folder as
    the recipe does and is killed there (SIGKILL: no Python left to clean up); a signal sent to the tiny recipe at
    its marker arrived too late under load (its logs follow 11 ms after the marker)."""
    from torchtune_longshort.training.output_dir import MARKER, claim_output_dir

    out = tmp_path / "out"
    child = ("import os, signal, sys; from pathlib import Path\n"
             "from torchtune_longshort.training.output_dir import claim_output_dir\n"
             "out = Path(sys.argv[1]); claim_output_dir(out, resume=False, overwrite=False)\n"
             "(out / '.staging' / 'step_0').mkdir(parents=True)\n"
             "os.kill(os.getpid(), signal.SIGKILL)\n")
    p = subprocess.run([sys.executable, "-c", child, str(out)], cwd=REPO, env=_env(tmp_path, LONGSHORT_TEST_FRESH="1"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert MARKER in {q.name for q in out.iterdir()} and not any(q.is_file() for q in (out / ".staging").rglob("*"))
    claim_output_dir(out, resume=False, overwrite=False).release()


# the recipe with its third step slow (a large model's): the test's two Ctrl-C land inside it, once the file its
# first argument names says the step has begun (step 2's save is over: a signal during that save ends the run there)
SLOW_THIRD_STEP = """import sys, time
from pathlib import Path
from torchtune_longshort.recipes import longshort_finetune as recipe
step = recipe.LongShortFinetuneRecipe._train_step
began = Path(sys.argv.pop(1))
def slow(self):
    if self.global_step == 2:
        began.touch()
        time.sleep(120)
    return step(self)
recipe.LongShortFinetuneRecipe._train_step = slow
recipe.recipe_main()
"""


def test_a_second_ctrl_c_stops_at_once_in_one_line(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """Ctrl-C during a step, then again: the first says at once which step it finishes and saves; the second (later
    than :data:`REPEAT_WINDOW_S`) stops at once, in one line naming the last saved step, exit 130, the folder's lock
    given back. Before: nothing, then a 71-line KeyboardInterrupt traceback, exit 1."""
    out, err_file = tmp_path / "out", tmp_path / "stderr.txt"
    cmd = tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "max_steps=6", "save_every_n_steps=1",
                   "validation=null")
    began = tmp_path / "step_3_began"
    cmd = [sys.executable, "-c", SLOW_THIRD_STEP, str(began)] + cmd[cmd.index("--config"):]
    with open(err_file, "w") as err:
        # forked from the warm zygote: the recipe starts no process, its relay passes each Ctrl-C on
        proc = subprocess.Popen(cmd, cwd=REPO, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 240
        first = "SIGINT: finishing step 3, then saving it; press Ctrl-C again to stop now without saving it\n"
        for waited in (began.is_file, lambda: first in err_file.read_text()):
            while not waited():
                assert proc.poll() is None and time.time() < deadline, err_file.read_text()[-3000:]
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(REPEAT_WINDOW_S + 0.2)  # a person's second Ctrl-C, not the same one delivered twice
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = err_file.read_text()
    assert proc.returncode == 130 and "Traceback" not in text and text.count(first) == 1, text[-3000:]
    assert text.splitlines()[-1] == (f"longshort_finetune: interrupted (SIGINT): stopped at once, without saving the "
                                     f"step in progress: the last saved step, {out / 'step_2'}, stands; continue with "
                                     "resume=True"), text[-3000:]
    assert not (out / ".lock").exists() and (out / "latest").read_text().strip() == "step_2"


def test_a_lost_process_of_a_torchrun_job_ends_the_others_in_one_line(tmp_path, capsys):
    """``kill -9`` of one torchrun worker: the others' collective fails with gloo's "Connection reset by peer" (NCCL:
    DistBackendError), which ended in ~100 lines of traceback; now one line naming it and what stands."""
    import torch.distributed as dist

    from torchtune_longshort.refusals import refusing
    from torchtune_longshort.training.checkpointing import StepCheckpoints
    from torchtune_longshort.training.lost_process import lost_process, lost_processes

    reset = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:29500: "
                         "Connection reset by peer")
    assert lost_process(reset) is None  # outside a process group: not another process's loss
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        assert lost_process(reset) == "gloo: Connection reset by peer"
        assert lost_process(dist.DistBackendError("NCCL error in: ProcessGroupNCCL.cpp:1234, remote process exited "
                                                  "or there was a network error")).startswith("NCCL: NCCL error in")
        assert lost_process(RuntimeError("Broken pipe")) is None  # no backend's: the error keeps its traceback
        assert lost_process(ValueError("gloo: Connection reset by peer")) is None

        def step():
            raise reset

        ckpts = StepCheckpoints(tmp_path / "out")
        with pytest.raises(SystemExit) as exit_info:
            refusing("longshort_finetune", lambda: lost_processes(step, ckpts.standing))
    finally:
        dist.destroy_process_group()
    assert exit_info.value.code == 2 and capsys.readouterr().err == (
        "longshort_finetune: error: another process of this run was lost (gloo: Connection reset by peer; torchrun's "
        "report below says how it ended): no step of this run was saved; start the run again with "
        f"overwrite_output_dir=True (output_dir={str(tmp_path / 'out')!r} holds this run's start)\n")


def test_a_torchrun_worker_stopped_while_it_imports_says_so_once(tmp_path):
    """Ctrl-C while the workers import torch and torchtune (seconds): each printed a KeyboardInterrupt traceback,
    then each exited 130 with no line at all (torchrun's launcher printed only its own SignalException traceback). Now
    the first worker stopped prints one line, as a stop while setting up does, and each writes it to the error file
    torchrun's agent reads; a second worker of the attempt only writes its file. References: ``signal``'s numbers and
    names, and the error file's JSON as ``torch.distributed.elastic``'s ``@record`` reads it."""
    (tmp_path / "torch.py").write_text("raise KeyboardInterrupt  # Ctrl-C, arriving while torch is imported\n")
    attempt = tmp_path / "attempt_0"
    results = []
    for rank in (0, 1):
        (attempt / str(rank)).mkdir(parents=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), LONGSHORT_TEST_FRESH="1",
                   TORCHELASTIC_RUN_ID="test", TORCHELASTIC_ERROR_FILE=str(attempt / str(rank) / "error.json"),
                   RANK=str(rank), LOCAL_RANK=str(rank))
        recipe_file = REPO / "torchtune_longshort" / "recipes" / "longshort_finetune.py"  # as `tune run` starts it
        results.append(subprocess.run([sys.executable, str(recipe_file), "--config", "x.yaml"], cwd=REPO, env=env,
                                      capture_output=True, text=True, timeout=60))
    first, second = results
    said = f"longshort_finetune: interrupted ({signal.Signals(signal.SIGINT).name}): stopped while it started"
    assert [p.returncode for p in results] == [128 + signal.SIGINT] * 2, [p.stderr[-2000:] for p in results]
    assert first.stderr.startswith(said) and first.stderr.count("\n") == 1, first.stderr[-2000:]
    assert second.stderr == "", second.stderr[-2000:]
    for rank in (0, 1):
        message = json.loads((attempt / str(rank) / "error.json").read_text())["message"]["message"]
        assert message == first.stderr.strip()


def test_a_signal_during_a_save_ends_the_run_with_that_save(tmp_path, sp_tokenizer_dir, restored_handlers, capfd):
    """SIGTERM while step 1's checkpoint is written (a large model's save takes minutes): the run ends once that save
    is in place, as a signal during a step does. It announced step 2, trained it and saved again: a step and a save
    more, past a scheduler's grace period (SLURM's KillWait: 30 s), where its SIGKILL lost both."""
    from test_resume_policy import _tiny_cfg

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    out = tmp_path / "out"
    run = LongShortFinetuneRecipe(_tiny_cfg(out, sp_tokenizer_dir, max_steps=3, save_every_n_steps=1))
    run.setup()
    run.stop_signals.install()
    run.before_commit = lambda step, staged: os.kill(os.getpid(), signal.SIGTERM) if step == 1 else None
    run.train()
    run.cleanup()
    err = capfd.readouterr().err
    assert "SIGTERM: saving step 1, then stopping;" in err, err[-2000:]  # it said "finishing step 1, then saving"
    assert run.stopped_by == signal.SIGTERM and run.global_step == 1
    assert (out / "latest").read_text().strip() == "step_1" and (out / "recipe_state" / "step_1.pt").is_file()
    assert not (out / "step_2").exists()
