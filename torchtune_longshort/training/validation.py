"""Plain next-token cross-entropy of a model on fixed-length validation sequences (the recipe's ``validation``)."""

from __future__ import annotations

import math
from typing import Dict, Sequence

import torch
from torch import nn

from torchtune_longshort.hidden_states import hidden_state_output, project_target_logprobs
from torchtune_longshort.loss.output_module import callable_output


@torch.no_grad()
def validation_metrics(model: nn.Module, sequences: Sequence[torch.Tensor], device: torch.device, vocab_size: int
                       ) -> Dict[str, float]:
    """``{"val_ce", "val_ppl"}`` over ``sequences`` (1-D token ids, one forward each), projected to the vocabulary
    a bounded chunk of positions at a time, with one device read for the pass; the model is left in train mode. A
    tied output whose weight FSDP2 holds sharded is projected with the gathered weight (every rank validates the
    same sequences)."""
    model.eval()
    # summed on the device in float64, sequence by sequence (the same additions as summing the per-sequence values
    # on the host), and read once: a read per sequence made each wait for the queue to drain on a GPU
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for row in sequences:
        tokens = row.to(device)
        with hidden_state_output(model) as decoder:
            hidden = model(tokens[None])[0]
        tok_lp, _ = project_target_logprobs(callable_output(decoder.output), hidden[:-1], tokens[1:], vocab_size)
        total = total - tok_lp.double().sum()
        count += tok_lp.shape[0]
    model.train()
    ce = float(total) / count
    return {"val_ce": ce, "val_ppl": math.exp(min(ce, 50.0))}
