"""A full disk: every writer's error recognised (on a real full tmpfs), the recipe's checkpoint room checked before
its first write and its plan against a byte-by-byte simulation, a save that finds no room ending the run in one line
with the last checkpoint whole and resumable, lm-eval's results that could not be written reported instead of a
silent exit 0, and a model fetch refused before it downloads."""

from __future__ import annotations

import json
import random
import sys

import pytest
from disk_full import needs_unshare, on_small_disk

from torchtune_longshort.disk_space import is_out_of_space, size_text
from torchtune_longshort.training.out_of_space import CheckpointPlan

WRITERS = r"""
import json, shutil, sys, torch
from safetensors.torch import save_file
from torchtune_longshort.disk_space import is_out_of_space, reason
d = sys.argv[1]
big = {"w": torch.zeros(1_000_000)}
def fobj():
    with open(f"{d}/b.pt", "wb") as f:
        torch.save(big, f)
def text():
    with open(f"{d}/c.txt", "w") as f:
        f.write("x" * 9_000_000)
cases = {"safetensors": lambda: save_file(big, f"{d}/a.safetensors"), "torch.save(file)": fobj, "write": text,
         "copy": lambda: shutil.copyfile(torch.__file__.replace("__init__.py", "lib/libtorch_cpu.so"), f"{d}/e.so"),
         "torch.save(path)": lambda: torch.save(big, f"{d}/p.pt")}
out = {}
for name, write in cases.items():
    try:
        write()
        out[name] = None
    except Exception as e:
        out[name] = [is_out_of_space(e), is_out_of_space(e, d), reason(e)]
    for p in __import__("pathlib").Path(d).iterdir():
        p.unlink()
print(json.dumps(out))
"""


@needs_unshare
def test_every_writer_s_full_disk_error_is_recognised(tmp_path):
    script = tmp_path / "writers.py"
    script.write_text(WRITERS)
    p = on_small_disk(tmp_path / "disk", "1m", f"{sys.executable} {script} {tmp_path / 'disk'}")
    assert p.returncode == 0, p.stderr[-3000:]
    found = json.loads(p.stdout.strip().splitlines()[-1])
    assert set(found) == {"safetensors", "torch.save(file)", "write", "copy", "torch.save(path)"}
    for name, (alone, with_folder, why) in found.items():
        assert with_folder, name
        if name != "torch.save(path)":  # torch's writer to a path says only "unexpected pos ...": the folder tells
            assert alone and ("No space left" in why or "os error 28" in why), (name, why)
    assert not is_out_of_space(FileNotFoundError(2, "No such file or directory", "x"))
    assert not is_out_of_space(RuntimeError("boom"))
    assert not is_out_of_space(MemoryError("file too large"))


def _simulated_fill(weights, state, keep, existing, first_extra, steps, free):
    """The disk, file by file: step_0, then each save writes its folder and its state, then deletes the oldest states
    past ``keep``."""
    used, states = first_extra, existing
    for step in steps:
        if used + weights + state > free:
            return step
        used, states = used + weights + state, states + 1
        while states > keep:
            used, states = used - state, states - 1
    return None


def test_checkpoint_plan_matches_a_simulation_of_the_disk():
    rng = random.Random(0)
    for _ in range(2000):
        weights, state = rng.randint(1, 50), rng.randint(0, 100)
        keep, existing = rng.randint(1, 3), rng.choice([0, 0, 1, 2])
        first = rng.choice([0, rng.randint(1, 60)])
        steps = list(range(rng.randint(0, 5) + 1, 30, rng.randint(1, 4)))[: rng.randint(1, 8)]
        free = rng.randint(0, 600)
        plan = CheckpointPlan(weights, state, keep, existing, first, steps)
        assert plan.fills_at(free) == _simulated_fill(weights, state, keep, existing, first, steps, free), plan


def test_sizes_read_as_a_person_writes_them():
    assert [size_text(n) for n in (0, 1023, 1024, 1536, 13.1 * 2**20, 5 * 2**40)] == [
        "0 B", "1023 B", "1 KiB", "1.5 KiB", "13.1 MiB", "5 TiB"]


def _one_error_line(stderr: str, prog: str) -> str:
    lines = [x for x in stderr.splitlines() if x.startswith(f"{prog}: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


@pytest.mark.slow
@needs_unshare
def test_recipe_on_a_full_disk(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """Refused before its first write when one checkpoint cannot fit; told at the start at which save the disk fills;
    ended there in one line with the last checkpoint whole; resumed once room is made."""
    disk = tmp_path / "disk"
    run = ("tune run torchtune_longshort/recipes/longshort_finetune.py "
           "--config configs/tiny/longshort_from_checkpoint.yaml "
           f"checkpoint_dir={tiny_llama2_dir} tokenizer.path={sp_tokenizer_dir / 'tokenizer.model'} "
           f"max_steps=6 save_every_n_steps=1 validation=null output_dir={disk / 'out'}")
    marks = " ; echo '#rc' $? ; ls -A " + str(disk / "out") + " ; echo '#resume'"
    p = on_small_disk(disk, "1m", run + marks, TMPDIR=tmp_path)
    assert "#rc 2" in p.stdout, p.stderr[-3000:]
    line = _one_error_line(p.stderr, "longshort_finetune")
    assert "the first checkpoint (step 1) needs at least" in line and "free of 1 MiB" in line, line
    assert p.stdout.split("#rc 2", 1)[1].split()[0] == "#resume"  # no folder left behind

    size = "5m"
    room_made = f"mount -o remount,size=8m {disk}"  # the disk grows: the room a user makes
    p = on_small_disk(disk, size, f"{run} {marks}; {room_made} && {run} resume=True; echo '#rc' $?; "
                                  f"ls -A {disk / 'out'}", TMPDIR=tmp_path)
    first, resumed = p.stderr.split("Resumed from", 1) if "Resumed from" in p.stderr else (p.stderr, "")
    forecasts = [int(x.split()[0]) for x in first.split("the disk fills at the save of step ")[1:]]
    # the start's (a lower bound: the tokenizer.json written beside a bare SentencePiece model is not counted), then
    # the one of the first save's real size, a step earlier
    assert len(forecasts) == 2 and forecasts[0] > forecasts[1] and "as the last one measured" in first, first[-3000:]
    predicted = forecasts[-1]
    line = _one_error_line(first, "longshort_finetune")
    assert f"writing checkpoint step_{predicted} after step {predicted}" in line, line
    assert "[Errno 28] No space left on device" in line and "continue with resume=True" in line, line
    assert f"the last complete checkpoint {disk / 'out'}/step_{predicted - 1} stands" in line, line
    listed = p.stdout.split("#rc 2", 1)[1].split("#resume")[0].split()
    assert ".staging" not in listed and f"step_{predicted - 1}" in listed and f"step_{predicted}" not in listed
    assert 3 <= predicted <= 5, (predicted, size)  # the size puts the fill in the middle of the run
    assert f"Resumed from {disk / 'out'}/step_{predicted - 1}" in "Resumed from" + resumed, resumed[-2000:]
    assert p.stdout.rstrip().endswith("torchtune_config.yaml") and "#rc 0" in p.stdout, p.stdout
    assert "step_6" in p.stdout.split("#rc 0", 1)[1].split()


FILL_AFTER_SCORING = r"""
import os, sys
import lm_eval.evaluator as ev
evaluate, disk = ev.evaluate, sys.argv[1]
def scored_then_disk_full(*a, **kw):  # another process fills the disk while the run scores
    out = evaluate(*a, **kw)
    fd = os.open(os.path.join(disk, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    os.close(fd)
    os.truncate(os.path.join(disk, "filler"), os.path.getsize(os.path.join(disk, "filler")) - 2048)
    return out
ev.evaluate = scored_then_disk_full
from torchtune_longshort.eval.__main__ import main
sys.argv = ["longshort-eval"] + sys.argv[2:]
main()
"""


@needs_unshare
def test_eval_whose_results_cannot_be_written_says_so(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """lm-eval logs "Could not save results aggregated" and exits 0; longshort-eval names the file (written whole or
    not at all: the full disk left none) and exits 2. A disk already full is refused before lm-eval starts."""
    disk, script = tmp_path / "disk", tmp_path / "fill.py"
    script.write_text(FILL_AFTER_SCORING)
    args = (f"run --model longshort --model_args pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir},"
            "dtype=float32 --tasks longshort_ppl "
            """--metadata '{"ppl_source":"stdlib","ppl_max_seq_lengths":[64],"ppl_num_samples":2}' """
            f"--output_path {disk / 'res'}")
    p = on_small_disk(disk, "2m", f"{sys.executable} {script} {disk} {args}; echo '#rc' $?; "
                                  f"find {disk / 'res'} -name '*.json'", TMPDIR=tmp_path)
    assert "#rc 2" in p.stdout and "token_nll_64" in p.stdout, p.stderr[-3000:]  # the scores were printed
    line = _one_error_line(p.stderr, "longshort-eval")
    assert "lm-eval could not write 1 results file" in line and "(not written)" in line, line
    assert "the disk is full" in line, line
    assert not p.stdout.split("#rc 2", 1)[1].strip()  # no cut-off JSON left for a report to read

    p = on_small_disk(disk, "1m", f"head -c 1000000 /dev/zero > {disk}/f; longshort-eval {args}; echo '#rc' $?",
                      TMPDIR=tmp_path)
    line = _one_error_line(p.stderr, "longshort-eval")
    assert "#rc 2" in p.stdout and f"--output_path {disk / 'res'}: its disk is full" in line, line
    assert "Running loglikelihood" not in p.stderr


@needs_unshare
def test_model_fetch_is_refused_before_it_downloads(tmp_path):
    disk = tmp_path / "disk"
    p = on_small_disk(disk, "64m", f"{sys.executable} -m torchtune_longshort.models.gguf --model "
                                   f"smollm2-135m-instruct --out {disk / 'cache'}; echo '#rc' $?; ls -A {disk}",
                      TMPDIR=tmp_path)
    line = _one_error_line(p.stderr, "python -m torchtune_longshort.models.gguf")
    assert "fetching and converting smollm2-135m-instruct" in line and "more than the 64 MiB free" in line, line
    assert p.stdout.split("#rc 2", 1)[1].strip() == ""  # nothing downloaded or made


def test_checkpoint_weights_are_sized_as_written(tiny_llama2_dir):
    """The estimate of a step folder's weights, from a model on the meta device, against the bytes of the tensors
    transformers' writer put in the tiny checkpoint (float32) and those at bf16."""
    import torch
    from safetensors import safe_open

    from torchtune_longshort.models.hf_model import hf_decoder
    from torchtune_longshort.training.out_of_space import weight_bytes

    with safe_open(str(tiny_llama2_dir / "model.safetensors"), "pt") as f:
        written = [f.get_slice(k) for k in f.keys()]
        numel = sum(int(torch.Size(s.get_shape()).numel()) for s in written)
    with torch.device("meta"):
        model = hf_decoder(str(tiny_llama2_dir))
    assert weight_bytes(model, torch.float32, False) == 4 * numel
    assert weight_bytes(model, torch.bfloat16, False) == 2 * numel


def test_a_samples_file_left_empty_or_short_is_named(tmp_path):
    """lm-eval appends a task's samples line by line: a full disk leaves the file empty or cut at a line's end, which
    parses; the count of lines against the samples it was given tells."""
    from torchtune_longshort.eval.results_written import SavedResults, _jsonl_reader

    saved = SavedResults()
    rows = [json.dumps({"doc_id": i}) + "\n" for i in range(3)]
    for name, text in (("empty", ""), ("short", "".join(rows[:2])), ("whole", "".join(rows))):
        (tmp_path / f"{name}.jsonl").write_text(text)
        saved.check(tmp_path / f"{name}.jsonl", _jsonl_reader(3))
    assert saved.failed == [f"{tmp_path / 'empty.jsonl'} (cut off; removed)",
                            f"{tmp_path / 'short.jsonl'} (cut off; removed)"]
    assert (tmp_path / "whole.jsonl").is_file() and not (tmp_path / "short.jsonl").exists()


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="no /dev/full")
def test_atomic_open_names_the_file_a_full_disk_stopped(tmp_path):
    """A writer's own ENOSPC names no file ('[Errno 28] No space left on device', what a flush to /dev/full raises:
    the reference); atomic_open raises it again naming the file it was writing, and leaves no temporary file."""
    from torchtune_longshort.output_guard import atomic_open

    with pytest.raises(OSError) as full:
        with open("/dev/full", "w") as f:
            f.write("x")
            f.flush()
    assert full.value.errno == 28 and not full.value.filename
    target = tmp_path / "summary.json"
    with pytest.raises(OSError) as raised:
        with atomic_open(target) as f:
            f.write("{}")
            raise full.value
    assert (raised.value.errno, raised.value.filename) == (28, str(target))
    assert not any(tmp_path.iterdir())
