"""An out-of-memory error in a training step ends the run in one line that says where, how many tokens, and what to
lower, at its last good step (saved), instead of the allocator's traceback.

References: a real allocator failure (the process's address space capped with ``RLIMIT_AS`` before the first step,
as a container's limit caps it: torch's CPU allocator then refuses the step's activations); the uninterrupted run's
losses for a run that ran out of memory in step 3 (the fault injected as ``torch.OutOfMemoryError``, a GPU's
error, which a CPU cannot raise at a chosen step) and resumed with activation checkpointing."""

from __future__ import annotations

import json
import resource
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from recipe_config import make_cfg

from torchtune_longshort.refusals import one_line
from torchtune_longshort.training.out_of_memory import OutOfMemory, is_out_of_memory, remedies


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


def _vm_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/self/status")


@contextmanager
def address_space(limit: int):
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _train(recipe_cls, cfg, limit=None):
    r = recipe_cls(cfg)
    try:
        r.setup()
        if limit is None:
            r.train()
        else:
            with address_space(_vm_size() + limit):
                r.train()
    finally:
        r.release_output_dir()
    return r


def _losses(out: Path):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_a_real_allocator_failure_in_step_1_is_one_line(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    out = tmp_path / "out"
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, batch_size=512, max_steps=2, **{"dataset.limit": None})
    with pytest.raises(OutOfMemory) as info:
        _train(recipe_cls, cfg, limit=64 * 2**20)
    msg = one_line(info.value)
    assert msg.startswith("out of memory in step 1 on cpu (2 windows x 512 sequence(s) x seq_len 64 = 65,536 tokens "
                          "per forward; "), msg
    assert "(ulimit -v)" in msg and "DefaultCPUAllocator: can't allocate memory" in msg, msg
    assert ("No step had finished; start again with overwrite_output_dir=True and less memory per step, in this order: "
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
    assert msg.startswith("out of memory in step 3 on cpu (2 windows x 4 sequence(s) x seq_len 64 = 512 tokens per "
                          "forward; "), msg
    assert f"The last good step is saved: {out / 'step_2'}; continue with resume=True and one of: " \
           "enable_activation_checkpointing=True (or start again with overwrite_output_dir=True" in msg, msg
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
    assert resumable == ["enable_activation_checkpointing=True", "tiled_mlp_tokens=4096",
                         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment"] and new_run[0].startswith("gradient_accumulation_steps=2 ")
    assert new_run[1:] == ["loss.num_chunks=6", "a shorter seq_len"]  # ceil((4096 + 2048) / 1024)
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
