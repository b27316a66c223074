"""Position-id schemes shared by the sparsity probes (the task modules lay out their own coupled ids).

- ``"plain"``: 0..s-1.
- ``"pose"``: PoSE-style (Zhu et al. 2024) during training: the sequence is cut into two chunks at a random point and
  the second chunk's ids are shifted by a random offset, so that short training inputs cover the position ids of the
  longest test input. Test inputs always use 0..s-1.
- ``"couple"``: position coupling (Cho et al. 2024): tokens that belong together share one id; which tokens those are
  is the task's layout, so each task module builds its own coupled ids.
"""

from __future__ import annotations

from typing import Optional

import torch

POSITION_SCHEMES = ("plain", "pose", "couple")
# the probes give custom ids only to the encodings that read absolute ids; NoPE and ALiBi keep the plain ones
PES_WITH_POSITION_IDS = ("rope", "learned")


def check_position_scheme(positions: str, pe: Optional[str] = None) -> None:
    """Raise ``ValueError`` unless ``positions`` is a known scheme (and, when ``pe`` is given, usable with that
    positional encoding)."""
    if positions not in POSITION_SCHEMES:
        raise ValueError(f"positions={positions!r} is unknown; accepted: {', '.join(POSITION_SCHEMES)}")
    if pe is not None and positions != "plain" and pe not in PES_WITH_POSITION_IDS:
        raise ValueError(f"positions={positions!r} needs pe 'rope' or 'learned', got pe={pe!r}")


def pose_ids(n_tok: torch.Tensor, s: int, max_pos: int, generator: torch.Generator) -> torch.Tensor:
    """PoSE-style training ids ``[b, s]`` for right-padded sequences of ``n_tok [b]`` real tokens: 0..s-1 cut in two
    chunks at a random point (the first token always in chunk 1) and the second chunk shifted by a random offset, so
    that the last real id is uniform-ish in ``[n_tok-1, max_pos-1]``. Padding gets id 0 (causal: never attended)."""
    b = n_tok.numel()
    if int(n_tok.max()) > max_pos:
        raise ValueError(f"a sequence of {int(n_tok.max())} tokens does not fit max_pos={max_pos}")
    base = torch.arange(s).expand(b, s).clone()
    cut = 1 + (torch.rand(b, generator=generator) * (n_tok - 1).double()).long()
    shift = (torch.rand(b, generator=generator) * (max_pos - n_tok + 1).double()).long()
    base = base + (base >= cut.unsqueeze(1)).long() * shift.unsqueeze(1)
    pad = torch.arange(s).unsqueeze(0) >= n_tok.unsqueeze(1)
    return torch.where(pad, torch.zeros_like(base), base)
