"""The MFU the benchmarks print (benchmarks/recipe_throughput.py, gpu_parts.py) against hand counts: N, the
parameters used in matmuls, of a tiny config written out layer by layer; FLOPs per token = 6 N + 6 x layers x L x
(heads x head_dim) (the module docstring: PaLM's 12 x layers x L x width for full attention, halved for causal); the
0.913 GFLOP/token docs/benchmarks.md states for SmolLM2-135M at L 1024; a GPU's peak from its datasheet."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
rt = importlib.import_module("recipe_throughput")
gpu_parts = importlib.import_module("gpu_parts")

TINY = dict(vocab_size=32, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=16, max_seq_len=64,
            intermediate_dim=24)
# per layer: q 16x16 + k 16x(2x4) + v 16x(2x4) + o 16x16 + gate, up, down 3 x 16x24 = 256+128+128+256+1152 = 1920
PER_LAYER = 1920


@pytest.mark.parametrize("component, tied", [("torchtune.models.llama2.llama2", False),
                                             ("torchtune.models.llama3_2.llama3_2", True)])
def test_matmul_params_count_every_linear_and_the_output_once(component, tied):
    extra = {"tie_word_embeddings": True} if tied else {}
    n, layers, attn = rt._matmul_params({"_component_": component, **TINY, **extra})
    assert (n, layers, attn) == (2 * PER_LAYER + 32 * 16, 2, 4 * 4)  # the output 32x16, tied or not: once


def test_flops_per_token_is_6n_plus_the_causal_attention_term():
    setup = types.SimpleNamespace(matmul_params=2 * PER_LAYER + 512, layers=2, attn_dim=16)
    assert rt.flops_per_token(setup, 128) == 6 * 4352 + 6 * 2 * 128 * 16 == 50688


def test_smollm2_135m_at_1k_is_the_0913_gflop_per_token_of_the_benchmark_doc():
    node = {"_component_": "torchtune.models.llama3_2.llama3_2", "vocab_size": 49152, "num_layers": 30,
            "num_heads": 9, "num_kv_heads": 3, "embed_dim": 576, "max_seq_len": 2048, "intermediate_dim": 1536,
            "tie_word_embeddings": True}
    n, layers, attn = rt._matmul_params(node)
    assert n == 134_479_872  # 30 x (2 x 576^2 + 2 x 576 x 192 + 3 x 576 x 1536) + 49152 x 576
    per_token = rt.flops_per_token(types.SimpleNamespace(matmul_params=n, layers=layers, attn_dim=attn), 1024)
    assert round(per_token / 1e9, 3) == 0.913


@pytest.mark.parametrize("name, tflops", [("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H200", 989),
                                          ("NVIDIA H100 PCIe", 756), ("NVIDIA H100 NVL", 835), ("NVIDIA H200 NVL", 835),
                                          ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA L4", None)])
def test_peak_flops_is_the_datasheets_dense_bf16(monkeypatch, name, tflops):
    """NVIDIA's datasheets: H100 / H200 SXM 989 TFLOPS dense BF16 (1979 is with sparsity), H100 PCIe 756 (1513),
    H100 NVL and H200 NVL 835 (1671), A100 312."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    got = gpu_parts.peak_flops("cuda")
    assert (None if got is None else round(got / 1e12)) == tflops
    assert gpu_parts.peak_flops("cpu") is None and gpu_parts.peak_flops("cuda", 100.0) == 100e12
