"""Long-short misalignment of a scalar model: the synthetic-task analogue of the paper's Eq. 4.

For a sequence x of L bits and suffix lengths l1, l2 ~ U{L//2..L} (independent; the range is the window geometry's,
:func:`torchtune_longshort.windows.suffix_length_range`, as for the language-model metric), Eq. 4 compares the model's
outputs on the last l1 and the last l2 bits. For a real-valued output the natural divergence is the squared
difference, and

    M(x) = E_{l1, l2} (y_hat(x[-l1:]) - y_hat(x[-l2:]))^2 / 2  =  Var_{l ~ U{L//2..L}} y_hat(x[-l:]),

i.e. the spread of the prediction for one sequence across its suffix lengths. We report M averaged over sequences and
its square root (a standard deviation, in output units), in the model's raw output space (f-space, what OutRep
changes) and on the target scale, next to the same quantity for the true targets (how misaligned the *task* is).
"""

from __future__ import annotations

import math
from typing import Dict

import torch
import torch.nn as nn

from torchtune_longshort.windows import suffix_length_range

from .outrep import get_outrep
from .tasks import check_bits, check_task, sample_bits, suffix_batch

# The spreads a scalar misalignment reports, each with its ``_std`` (:func:`scalar_misalignment`): model output and true
# target, in f-space and y-space.
SPREADS = ("model_f", "model_y", "target_f", "target_y")


def _suffix_var(values: torch.Tensor) -> float:
    # values: [n_seq, n_suffix]; population variance over suffixes == E(a-b)^2/2 for iid uniform suffix lengths
    return float(values.var(dim=1, unbiased=False).mean())


@torch.no_grad()
def scalar_misalignment(
    model: nn.Module,
    task: str,
    L: int,
    outrep: str = "identity",
    n_seq: int = 64,
    bits: str = "iid",
    seed: int = 0,
) -> Dict[str, float]:
    """Suffix-length spread of a scalar model's prediction (Eq. 4 with squared difference).

    Args:
        model: ``(tokens, read_pos) -> [b]`` (a ``SyntheticTransformer`` or ``LinearAttentionModel``) whose output is
            f(y) for the OutRep ``outrep``.
        task: target used for the reference spread of the true targets.
        L: full sequence length; suffixes have lengths L//2..L (the paper's [L/2, L], ``suffix_length_range``).
        n_seq, bits, seed: how many sequences, their bit distribution, RNG seed.
    Returns:
        dict with ``model_f`` / ``model_y`` (mean variance across suffixes of the raw output / of f^{-1} of it),
        ``target_f`` / ``target_y`` (same for the true targets; ``nan`` in f-space when f is undefined at a target),
        and ``*_std`` = sqrt of each.
    """
    check_task(task)
    check_bits(bits)
    if L < 2:
        raise ValueError(f"L={L} must be >= 2 to have two suffix lengths")
    if n_seq < 1:
        raise ValueError(f"n_seq={n_seq} must be >= 1")
    f = get_outrep(outrep)
    g = torch.Generator().manual_seed(seed)
    x = sample_bits(torch.full((n_seq,), L, dtype=torch.long), bits, g)
    lo, hi = suffix_length_range(L)
    suffixes = list(range(lo, hi + 1))
    model.eval()
    zs, ys, ts = [], [], []
    for row in x.tolist():
        b = suffix_batch(row, suffixes, task)
        z = model(b.tokens, b.eos_pos).double()
        zs.append(z)
        ys.append(f.inverse(z))
        ts.append(b.target)
    zs, ys, ts = torch.stack(zs), torch.stack(ys), torch.stack(ts)
    try:
        tf = _suffix_var(f.forward(ts))
    except ValueError:
        tf = float("nan")
    out = dict(zip(SPREADS, (_suffix_var(zs), _suffix_var(ys), tf, _suffix_var(ts))))
    out.update({k + "_std": math.sqrt(v) for k, v in list(out.items())})
    return out
