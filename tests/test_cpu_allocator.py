"""glibc keeps large freed blocks after ``reuse_large_cpu_blocks``: counted in page faults, in fresh processes."""

import json
import os
import subprocess
import sys

import pytest

from torchtune_longshort.training.cpu_allocator import reuse_large_cpu_blocks

CODE = """
import json, resource, sys, torch
if sys.argv[1] == "on":
    from torchtune_longshort.training.cpu_allocator import reuse_large_cpu_blocks
    assert reuse_large_cpu_blocks()
elif sys.argv[1].startswith("eval"):  # the eval model, loaded on a CPU: eval (its default) or eval=<value>
    from torchtune_longshort.eval.model.adapter import LongShortLM
    kw = {"cpu_keep_freed_blocks": sys.argv[1][5:]} if "=" in sys.argv[1] else {}
    LongShortLM(pretrained=sys.argv[2], tokenizer=sys.argv[3], device="cpu", **kw)
elif sys.argv[1].startswith("mis"):  # longshort-misalignment on a CPU: mis (its default) or mis=<flag>
    from torchtune_longshort.metrics.cli import main
    flag = [sys.argv[1][4:]] if "=" in sys.argv[1] else []
    assert main(["--checkpoint-dir", sys.argv[2], "--tokenizer", sys.argv[3], "--length", "32",
                 "--num-samples", "1", *flag]) == 0
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def cycle():  # the loss chunk's pattern: allocate a 40 MiB buffer, fill it, free it
    x = torch.empty(40 * 2**20 // 4)
    x.fill_(1.0)
    del x
for _ in range(8):  # warm-up: glibc settles its heap in the first few cycles
    cycle()
before = faults()
for _ in range(10):
    cycle()
print(json.dumps({"faults": faults() - before}))
"""


def _faults(mode: str, *args, fresh: bool = True) -> int:
    """Page faults over ten cycles in a new process: a fresh interpreter, or (``fresh=False``) one forked from the
    tests' zygote, which imported torch and never called mallopt; glibc maps a 40 MiB block anew there as in a fresh
    process (above the largest mmap threshold its own tuning reaches, 32 MiB), which the first test shows fresh."""
    env = dict(os.environ, **({"LONGSHORT_TEST_FRESH": "1"} if fresh else {}))
    p = subprocess.run([sys.executable, "-c", CODE, mode, *map(str, args)], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])["faults"]


@pytest.mark.skipif(not reuse_large_cpu_blocks(), reason="not glibc: the allocator setting does not apply")
def test_freed_large_blocks_are_reused_without_page_faults():
    pages_per_block = 40 * 2**20 // 4096
    off, on = _faults("off"), _faults("on")
    assert off >= 10 * pages_per_block * 0.9  # every block mapped and zero-filled anew
    assert on <= 2 * pages_per_block and 5 * on < off  # the heap's pages serve (nearly) all ten


@pytest.mark.skipif(not reuse_large_cpu_blocks(), reason="not glibc: the allocator setting does not apply")
def test_the_eval_model_on_a_cpu_keeps_freed_blocks_unless_told_not_to(tiny_llama2_dir, sp_tokenizer_dir):
    """The ``longshort`` eval model turns the setting on when it loads on a CPU (``cpu_keep_freed_blocks``, default
    true): a 40 MiB block freed and allocated again is not page-faulted in again; ``=false`` leaves glibc as it is."""
    pages_per_block = 40 * 2**20 // 4096
    folders = (tiny_llama2_dir, sp_tokenizer_dir)
    assert _faults("eval", *folders, fresh=False) < pages_per_block  # fewer than one block's pages over ten cycles
    assert _faults("eval=false", *folders, fresh=False) >= 10 * pages_per_block * 0.9


@pytest.mark.skipif(not reuse_large_cpu_blocks(), reason="not glibc: the allocator setting does not apply")
def test_the_misalignment_cli_on_a_cpu_keeps_freed_blocks_unless_told_not_to(tiny_llama2_dir, sp_tokenizer_dir):
    pages_per_block = 40 * 2**20 // 4096
    folders = (tiny_llama2_dir, sp_tokenizer_dir)
    assert _faults("mis", *folders, fresh=False) < pages_per_block
    assert _faults("mis=--no-cpu-keep-freed-blocks", *folders, fresh=False) >= 10 * pages_per_block * 0.9


@pytest.mark.parametrize("native", [False, True])
def test_bf16_on_a_cpu_without_native_bf16_is_named(monkeypatch, native):
    """The recipe's CPU lines name bf16 on a CPU without AVX512-BF16 / AMX (measured 21x slower than fp32 on an AVX2
    EPYC), and only there: not for fp32, not on CUDA, not where the CPU has native bf16."""
    import torch

    from torchtune_longshort.training.cpu_allocator import cpu_notes

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    named = [n for n in cpu_notes("cpu", torch.bfloat16, False) if "dtype=bf16" in n]
    assert len(named) == (0 if native else 1)
    assert not [n for n in cpu_notes("cpu", torch.float32, False) + cpu_notes("cuda", torch.bfloat16, False)
                if "bf16" in n]
