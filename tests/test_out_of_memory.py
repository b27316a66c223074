"""An out-of-memory error in a training step ends the run in one line that says where, how many tokens, and what to
lower, at its last good step (saved), instead of the allocator's traceback.

References: a real allocator failure (a fresh process's address space capped with ``RLIMIT_AS``, as a container's
limit caps it: torch's CPU allocator then refuses the first step's activations); the uninterrupted run's
losses for a run that ran out of memory in step 3 (the fault injected as ``torch.OutOfMemoryError``, a GPU's
error, which a CPU cannot raise at a chosen step) and resumed with activation checkpointing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from recipe_config import CFG, REPO, make_cfg

from torchtune_longshort.refusals import one_line
from torchtune_longshort.devices import is_out_of_memory
from torchtune_longshort.training.out_of_memory import OutOfMemory, remedies


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


def _train(recipe_cls, cfg):
    r = recipe_cls(cfg)
    try:
        r.setup()
        r.train()
    finally:
        r.release_output_dir()
    return r


def _losses(out: Path):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


# The recipe as `tune run` starts it, in a fresh process (its heap holds no freed blocks of earlier tests, which a
# step could reuse under the cap), with its address space capped at what it maps + CAP_HEADROOM first.
CAP_HEADROOM = 512 * 2**20
CAPPED_RUN = """
import resource, sys
from pathlib import Path
from torchtune_longshort.recipes.longshort_finetune import recipe_main
vm = next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm + int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)[1]))
sys.argv = ["longshort_finetune.py", *sys.argv[2:]]
recipe_main()
"""


def test_a_real_allocator_failure_in_step_1_is_one_line(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    import os
    import subprocess
    import sys

    from warm_start import with_warm_start

    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=with_warm_start(str(REPO)), OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", CAPPED_RUN, str(CAP_HEADROOM), "--config", str(CFG),
                        f"checkpoint_dir={tiny_llama2_dir}", f"tokenizer.path={sp_tokenizer_dir / 'tokenizer.model'}",
                        f"output_dir={out}", "batch_size=2048", "max_steps=2", "dataset.limit=null"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in p.stderr.splitlines() if "error" in line.lower()]
    assert p.returncode == 2 and len(errors) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    msg = errors[0]
    assert msg.startswith("longshort_finetune: error: out of memory in step 1 on cpu (2 windows x 2048 sequences "
                          "x seq_len 64 = 262,144 tokens per forward; "), msg
    assert "(ulimit -v)" in msg and "DefaultCPUAllocator: can't allocate memory" in msg, msg
    assert ("No step had finished; start the run again with overwrite_output_dir=True and less memory per step, "
            "in this order: "
            "enable_activation_checkpointing=True; tiled_mlp_tokens=4096; gradient_accumulation_steps=2") in msg, msg
    assert not list(out.glob("step_[1-9]*")) and "loss" not in (out / "metrics.jsonl").read_text()


def test_out_of_memory_in_step_3_saves_step_2_and_resumes_exactly(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                   sp_tokenizer_dir, monkeypatch):
    reference = _losses(_train(recipe_cls, make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "ref",
                                                    max_steps=4)).output_dir)
    out = tmp_path / "out"
    original = recipe_cls._loss_step

    def step_3_fails(self, batch):  # after step 3's batch was drawn: the data position must go back to its start
        if self.global_step == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(self, batch)

    monkeypatch.setattr(recipe_cls, "_loss_step", step_3_fails)
    with pytest.raises(OutOfMemory) as info:
        _train(recipe_cls, make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=4))
    msg = one_line(info.value)
    assert msg.startswith("out of memory in step 3 on cpu (2 windows x 4 sequences x seq_len 64 = 512 tokens per "
                          "forward; "), msg
    assert f"The last good step is saved: {out / 'step_2'}; continue with resume=True and one of: " \
           "enable_activation_checkpointing=True (or start the run again with overwrite_output_dir=True" in msg, msg
    monkeypatch.setattr(recipe_cls, "_loss_step", original)
    _train(recipe_cls, make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=4, resume=True,
                                enable_activation_checkpointing=True))
    assert _losses(out) == reference


def test_remedies_name_only_what_the_run_does_not_use(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, monkeypatch):
    from torchtune_longshort.training.recipe_config import load_recipe_config

    def config(**over):
        return load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "o", **over), local=False)

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    cuda = torch.device("cuda", 0)
    resumable, new_run = remedies(config(seq_len=4096, batch_size=2, **{"model.max_seq_len": 8192}), cuda, 4)
    # loss.num_chunks: ceil((4096 + 2048) / 1024), which a resume applies (LossConfig.RESUME_APPLIED)
    assert resumable == ["enable_activation_checkpointing=True", "tiled_mlp_tokens=4096", "loss.num_chunks=6",
                         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment"]
    assert new_run[0].startswith("gradient_accumulation_steps=2 ") and new_run[1:] == ["a shorter seq_len"]
    # the two kinds are the resume check's own: a remedy offered for a resume is a key a resume applies, the rest
    # keys it refuses to change (the README's out-of-memory paragraph said loss.num_chunks needed a new run)
    from torchtune_longshort.config.fields import resume_policies
    from torchtune_longshort.training.recipe_config import RecipeConfig

    policy = resume_policies(RecipeConfig)
    assert {policy[r.split("=")[0]] for r in resumable if "=" in r and "ALLOC" not in r} == {"applied"}
    assert {policy[r.split("=")[0]] for r in new_run if "=" in r} | {policy["seq_len"]} == {"exact"}
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    resumable, new_run = remedies(config(seq_len=8192, batch_size=1, enable_activation_checkpointing=True,
                                         **{"model.max_seq_len": 16384, "loss.num_chunks": 12}), cuda, 12)
    assert resumable == ["enable_activation_offloading=True", "tiled_mlp_tokens=4096"]
    assert new_run == ["a shorter seq_len"]  # one sequence per forward already, and 12 chunks of <= 1024 rows
    resumable, _ = remedies(config(enable_activation_checkpointing=True, tiled_mlp_tokens=512), torch.device("cpu"), 4)
    assert resumable == []  # offloading moves activations to the host: a CPU run's are there already
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate "
                                         "memory: you tried to allocate 360710144 bytes"))
    assert not is_out_of_memory(RuntimeError("shape mismatch")) and is_out_of_memory(torch.OutOfMemoryError("x"))


def test_validation_out_of_memory_is_said_once_and_training_goes_on(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                     sp_tokenizer_dir, monkeypatch, capsys):
    # validation.seq_len may be longer than the training windows: its out of memory must not end a run whose steps fit
    import torchtune_longshort.recipes.longshort_finetune as recipe_module

    validation = {"dataset": {"_component_": "torchtune_longshort.data.corpus.stdlib", "include_tests": "only"},
                  "seq_len": 128, "num_sequences": 2, "every_n_steps": 2}
    reference = _losses(_train(recipe_cls, make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "ref",
                                                    max_steps=4)).output_dir)
    calls = []

    def fails(*args, **kwargs):
        calls.append(args)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(recipe_module, "validation_metrics", fails)
    r = _train(recipe_cls, make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=4,
                                    validation=validation))
    assert _losses(r.output_dir) == reference and len(calls) == 1 and r._model.training
    out = capsys.readouterr().out
    assert ("step 2: validation after step 2 ran out of memory on cpu at validation.seq_len 128 (CUDA out of memory. "
            "Tried to allocate 8.00 GiB): no validation for the rest of this run; a shorter validation.seq_len fits"
            ) in out, out
    assert "val_ce" not in (r.output_dir / "metrics.jsonl").read_text()


def test_out_of_memory_in_the_optimizers_update_saves_nothing(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                sp_tokenizer_dir, monkeypatch):
    # the update may have changed some weights and not others: saving them as the last good step would be a lie
    calls = []
    update = torch.optim.AdamW.step

    def fails_third(self, *args, **kwargs):
        if len(self.param_groups[0]["params"]) > 1:  # the run's, not the one-value stand-in that sizes its state
            calls.append(1)
        if len(calls) == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB")
        return update(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", fails_third)
    out = tmp_path / "out"
    with pytest.raises(OutOfMemory) as info:
        _train(recipe_cls, make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=4))
    msg = one_line(info.value)
    assert "out of memory in step 3 on cpu" in msg, msg
    assert "2 steps had finished, none saved; start the run again with overwrite_output_dir=True" in msg, msg
    assert not list(out.glob("step_[1-9]*"))
