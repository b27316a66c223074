"""End-to-end tests of recipes/longshort_finetune.py through ``tune run`` (subprocesses, as a user runs it).

References: an uninterrupted run for resume and for the kill test; the single-process run for the 2-process
(FSDP2 over gloo) run with the same global batch.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warm_start import with_warm_start

REPO = Path(__file__).resolve().parents[1]
TUNE = str(Path(sys.executable).with_name("tune"))
RECIPE = "recipes/longshort_finetune.py"
CFG = "configs/tiny/longshort_from_checkpoint.yaml"


def _env(tmp: Path, **extra) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=with_warm_start(str(REPO)), OMP_NUM_THREADS="1", TMPDIR=str(tmp))  # offline: conftest
    env.update({k: str(v) for k, v in extra.items()})
    return env


def tune_cmd(config: str, ckpt: Path, tok: Path, out: Path, *overrides: str, nproc: int = 1) -> list:
    dist = ["--nproc_per_node", str(nproc)] if nproc > 1 else []
    return [
        TUNE, "run", *dist, RECIPE, "--config", config, f"checkpoint_dir={ckpt}",
        f"tokenizer.path={tok / 'tokenizer.model'}", f"output_dir={out}", *overrides,
    ]


def run_tune(cmd: list, tmp: Path, timeout: int = 300, **env) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=REPO, env=_env(tmp, **env), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return p


def losses(out: Path) -> list:
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_llama2_dir, sp_tokenizer_dir):
    """The reference: 8 steps, alpha 0.1, checkpoints at 4 and 8, in one process."""
    tmp = tmp_path_factory.mktemp("ref")
    out = tmp / "out"
    run_tune(tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "loss.alpha=0.1"), tmp)
    return out


@pytest.mark.slow
def test_checkpoint_is_hf_format_with_rope_and_state(uninterrupted):
    from transformers import LlamaForCausalLM

    assert (uninterrupted / "latest").read_text().strip() == "step_8"
    for step in (4, 8):  # torchtune's layout: model folders, and the one resumable state beside them
        d = uninterrupted / f"step_{step}"
        assert (d / "config.json").is_file() and not (d / "recipe_state.pt").exists()
    assert sorted(p.name for p in (uninterrupted / "recipe_state").iterdir()) == ["step_8.pt"]  # keep 1: the last
    assert not (uninterrupted / ".staging").exists()  # no empty folder left behind
    m = LlamaForCausalLM.from_pretrained(str(uninterrupted / "step_8"))
    assert m.config.max_position_embeddings == 256
    rows = losses(uninterrupted)
    assert [s for s, _ in rows] == list(range(1, 9))
    header, first = [json.loads(l) for l in (uninterrupted / "metrics.jsonl").read_text().splitlines()[:2]]
    assert header["step"] == 0 and header["provenance"]["device"]["type"] == "cpu"
    assert "stdlib_corpus" in header["provenance"]  # the tiny config trains on the stdlib corpus
    for k in ("loss", "ce", "misalignment", "lr", "tokens_per_second", "peak_memory_gib", "e"):
        assert k in first


@pytest.mark.slow
def test_resume_gives_identical_losses(uninterrupted, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    out = tmp_path / "out"
    run_tune(tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "loss.alpha=0.1", "stop_after_step=4"), tmp_path)
    assert [s for s, _ in losses(out)] == [1, 2, 3, 4]
    run_tune(tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "loss.alpha=0.1", "resume=True"), tmp_path)
    # Same process count, same threads, same data position and RNG: bit-identical on CPU.
    assert losses(out) == losses(uninterrupted)


@pytest.mark.slow
def test_sigkill_during_save_resumes_from_last_complete(uninterrupted, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    # SIGKILL during the second save (step_4 complete, step_8 fully staged but not renamed into place): the recipe's
    # before_commit callback holds that save open so the kill lands inside it.
    out2 = tmp_path / "out2"
    cmd2 = tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out2, "loss.alpha=0.1")
    overrides = cmd2[cmd2.index("--config") + 2:]
    script = (
        "import time\n"
        "from omegaconf import OmegaConf\n"
        "from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe\n"
        f"cfg = OmegaConf.merge(OmegaConf.load({CFG!r}), OmegaConf.from_dotlist({overrides!r}))\n"
        "r = LongShortFinetuneRecipe(cfg)\n"
        "r.before_commit = lambda step, staged: time.sleep(1000) if step == 8 else None\n"
        "r.setup(); r.train(); r.cleanup()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=_env(tmp_path, LONGSHORT_TEST_FRESH=1),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        staged = out2 / ".staging" / "step_8.pt"  # the staged recipe state: written after the staged folder
        deadline = time.time() + 180
        while not staged.exists():
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert (out2 / "recipe_state" / "step_4.pt").is_file() and not (out2 / "step_8").exists()
    run_tune(cmd2 + ["resume=True"], tmp_path)  # the dead run's lock is stale and taken over
    assert losses(out2) == losses(uninterrupted)


def test_accumulation_splits_a_step_without_changing_it(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """At a fixed shift (``e_range=[k,k]``, docs/recipe.md) ``gradient_accumulation_steps`` 1 and 2 train on the same
    samples at the same positions: the same losses, misalignments and gradient norms (float rounding), and the same
    PoSE position ids per sample, compared row by row (each sample draws its window A's positions, then its B's;
    one draw of every A row, then every B row, gave sample 2's window A the ids of sample 1's window B once the
    batch was split: losses 5e-4 apart). In-process, 2 steps."""
    from unittest import mock

    import torch
    from recipe_config import make_cfg

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training import data_setup

    pose = {"_component_": "torchtune_longshort.rope.PoSEPositions", "target_len": 256}
    runs, real = [], data_setup.window_positions
    for accum in (1, 2):
        out, drawn = tmp_path / f"accum{accum}", []
        r = LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=2, e_range=[8, 8],
                                             batch_size=2, gradient_accumulation_steps=accum,
                                             position_sampler=pose, save_every_n_steps=10**6))
        r.setup()
        with mock.patch("torchtune_longshort.recipes.longshort_finetune.window_positions",
                        lambda *a: drawn.append(real(*a)) or drawn[-1]):
            r.train()
        r.release_output_dir()
        rows = [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in row]
        # this micro-batch's rows, A then B: per sample (A, B) pairs in the step's order
        pairs = [p for d in drawn for p in zip(*d.chunk(2))]
        runs.append(([[row[k] for k in ("loss", "misalignment", "grad_norm")] for row in rows], pairs))
    (one, pos_one), (two, pos_two) = runs
    assert len(one) == len(two) == 2 and len(pos_one) == len(pos_two) == 4
    for x, y in zip(one, two):
        assert all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(x, y)), (one, two)
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(pos_one, pos_two))


def test_the_packed_stream_is_bos_document_eos_as_torchtunes_text_completion(tmp_path, tiny_llama2_dir,
                                                                                sp_tokenizer_dir):
    """Each document enters the recipe's stream as BOS + its tokens + EOS (torchtune's text-completion datasets,
    ``encode(add_bos=True, add_eos=True)``), then the next document's BOS; in-process, setup only."""
    from recipe_config import make_cfg

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    r = LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "o", max_steps=1))
    r.setup()
    try:
        tok, docs = r._tokenizer, iter(r._documents())
        first, second = (tok.encode(next(docs), add_bos=False, add_eos=False) for _ in range(2))
        got = r._batcher.stream.take(len(first) + 4)
        assert got == [tok.bos_id, *first, tok.eos_id, tok.bos_id, second[0]]
    finally:
        r.release_output_dir()


@pytest.mark.slow
def test_two_process_fsdp_matches_single_process(uninterrupted, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "out"
    # Also the long-window memory settings under FSDP2: every layer checkpointed, its MLP in tiles of 48 rows (the
    # windows' 2 x 2 x 64 rows per rank in 6 tiles); the reference runs without them, so they must not move a loss.
    p = run_tune(tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "loss.alpha=0.1", "tiled_mlp_tokens=48",
                          "enable_activation_checkpointing=True", nproc=2), tmp_path, timeout=400)
    assert "tiled MLP: 2 decoder layers' MLPs run over tiles of 48 token rows" in p.stdout + p.stderr
    ref, got = losses(uninterrupted), losses(out)
    assert [s for s, _ in got] == [s for s, _ in ref]
    # Same global batch (4 = 2 ranks x 2); only the reduction order differs: fp32 round-off.
    for (_, a), (_, b) in zip(ref, got):
        assert abs(a - b) <= 1e-5 * abs(a), (a, b)
    wa = load_file(str(uninterrupted / "step_8" / "model-00001-of-00001.safetensors"))
    wb = load_file(str(out / "step_8" / "model-00001-of-00001.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_two_process_compiled_run_matches_single_process(uninterrupted, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """The GPU path's switches together under FSDP2 (2 processes, gloo): compile, activation checkpointing, the
    weights kept gathered from forward to backward (fsdp_reshard_after_forward=False) and the profiler. Steps 1-4 and
    step 4's validation (an eval-mode graph) give the eager one-process run's values; rank 0 alone logs; each rank
    writes its own trace once. The layers compile under ``aot_eager`` (dynamo and AOT autograd through FSDP2's hooks,
    where a sharded model differs; inductor's kernels are tests/test_compile.py's): as a plain `tune run` 22 s here
    against 50 s with inductor's C++ kernels compiled afresh (docs/benchmarks.md, "compile under two processes")."""
    out = tmp_path / "out"
    profiler = ["profiler._component_=torchtune.training.setup_torch_profiler", "profiler.enabled=True",
                "profiler.wait_steps=1", "profiler.warmup_steps=1", "profiler.active_steps=1", "profiler.num_cycles=1"]
    p = run_tune(tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "loss.alpha=0.1", "stop_after_step=4",
                          "compile=True", "enable_activation_checkpointing=True", "fsdp_reshard_after_forward=False",
                          *profiler, nproc=2), tmp_path, timeout=400, TORCH_COMPILE_BACKEND="aot_eager")
    said = p.stdout + p.stderr
    assert said.count("compile: layers.0 compiled the layers' graph at its call 1") == 1, said[-3000:]
    assert said.count("CPU: glibc keeps large freed blocks") == 1  # rank 0's line (each rank printed it)
    for key, rel in (("loss", 1e-5), ("val_ce", 1e-6)):
        ref, got = _metric(uninterrupted, key)[:len(_metric(out, key))], _metric(out, key)
        assert len(got) == (4 if key == "loss" else 1) and all(abs(a - b) <= rel * a for a, b in zip(ref, got)), \
            (key, ref, got)
    cycle = out / "profiling_outputs" / "iteration_3"
    names = sorted(f.name for f in cycle.iterdir())
    assert [n.split("-")[0] if n.endswith(".pt.trace.json.gz") else n for n in names] == [
        "r0", "r1", "rank0_key_averages.txt", "rank1_key_averages.txt"], names
    assert said.count("Dumping traces at step 3") == 1


def _metric(out: Path, key: str) -> list:
    return [r[key] for r in (json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()) if key in r]


@pytest.mark.slow
def test_two_process_tied_embeddings_match_one_process(tmp_path, family_dirs):
    """A tied-embedding model (SmolLM2's layout: the output projects with the token embedding, which FSDP2's root
    unit holds and has resharded when the loss runs) trained by 2 processes: the 4 losses and gradient norms equal
    the one-process run's on the same global batch, and so do the saved weights, the embedding included (its
    gradient sums the lookup's part, reduced by FSDP2, and the loss's, reduced by the loss). With PoSE positions:
    every sample gets the positions it gets in one process (one generator draws the global batch), and the 2-process
    run resumed from step 2 gives the same losses (the one saved generator state serves both ranks)."""
    import torch
    from safetensors.torch import load_file

    config = "configs/smollm2_135m/yarn_16k_stdlib.yaml"
    overrides = [
        f"checkpoint_dir={family_dirs['smollm2']}", "model.max_seq_len=512", "seq_len=64", "batch_size=4",
        "gradient_accumulation_steps=1", "max_steps=4", "loss.alpha=0.1", "loss.num_chunks=2",
        "optimizer.lr=1e-3", "optimizer.fused=False", "lr_scheduler.num_warmup_steps=0", "validation=null",
        "device=cpu", "dtype=fp32", "compile=False", "enable_activation_checkpointing=False",
        "dataset._component_=torchtune_longshort.data.corpus.stdlib", "dataset.include_tests=False",
        "dataset.limit=20", "save_every_n_steps=2", "keep_recipe_states=2",
        "position_sampler._component_=torchtune_longshort.rope.PoSEPositions", "position_sampler.target_len=512",
    ]
    outs = []
    for nproc in (1, 2):
        out = tmp_path / f"nproc{nproc}"
        dist = ["--nproc_per_node", "2"] if nproc > 1 else []
        p = run_tune([TUNE, "run", *dist, RECIPE, "--config", config, f"output_dir={out}", *overrides], tmp_path,
                     timeout=400)
        assert "Loss path: fused (output module TiedLinear)" in p.stdout + p.stderr
        outs.append(out)
    one, two = outs
    for key, rel in (("loss", 1e-5), ("grad_norm", 1e-4)):
        a, b = _metric(one, key), _metric(two, key)
        assert len(a) == len(b) == 4 and all(abs(x - y) <= rel * abs(x) for x, y in zip(a, b)), (key, a, b)
    wa = load_file(str(one / "step_4" / "model-00001-of-00001.safetensors"))
    wb = load_file(str(two / "step_4" / "model-00001-of-00001.safetensors"))
    assert wa.keys() == wb.keys() and "lm_head.weight" not in wa
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5)
    reference = losses(two)
    shutil.rmtree(two / "step_4")
    (two / "recipe_state" / "step_4.pt").unlink()
    run_tune([TUNE, "run", "--nproc_per_node", "2", RECIPE, "--config", config, f"output_dir={two}", *overrides,
              "resume=True"], tmp_path, timeout=400)
    assert losses(two) == reference


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_and_resumes_exactly(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """A scheduler's SIGTERM: the step in flight finishes, a checkpoint is written, the exit code says 'signal',
    and resume=True reproduces an uninterrupted run's losses."""
    common = ["loss.alpha=0.1", "max_steps=200", "save_every_n_steps=100", "validation=null"]
    ref = tmp_path / "ref"
    run_tune(tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, ref, *common, "stop_after_step=12"), tmp_path)
    out = tmp_path / "out"
    cmd = tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, *common)
    # forked from the warm zygote: its relay passes the SIGTERM on and exits with the recipe's code
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 240
    while not ((out / "metrics.jsonl").is_file() and any(s >= 2 for s, _ in losses(out))):
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-3000:] if proc.poll() else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    last = losses(out)[-1][0]
    assert (out / "recipe_state" / f"step_{last}.pt").is_file() and "SIGTERM received" in err
    run_tune(cmd + ["resume=True", "stop_after_step=12"], tmp_path)
    assert losses(out)[:12] == losses(ref)[:12]


@pytest.mark.slow
def test_resume_applies_a_lowered_lr(uninterrupted, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    out = tmp_path / "out"
    run_tune(tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "loss.alpha=0.1", "stop_after_step=4"), tmp_path)
    run_tune(tune_cmd(CFG, tiny_llama2_dir, sp_tokenizer_dir, out, "loss.alpha=0.1", "resume=True",
                      "optimizer.lr=1.5e-3"), tmp_path)
    rows = {r["step"]: r for r in (json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()) if "lr" in r}
    ref = {r["step"]: r for r in (json.loads(l) for l in (uninterrupted / "metrics.jsonl").read_text().splitlines())
           if "lr" in r}
    assert rows[4]["lr"] == ref[4]["lr"]
    for step in range(5, 9):  # same schedule, half the base lr
        assert rows[step]["lr"] == pytest.approx(ref[step]["lr"] / 2, rel=1e-6)
