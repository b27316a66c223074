"""Parity with a scratchpad and coupled position ids (Golowich et al. 2025; Cho et al. 2024), CPU-sized.

Golowich et al. argue that a scratchpad plus *position coupling* turns a dense task (parity of all bits) into a
sparse and local one, and so one that length-generalizes.

Input ``<BOS> b_1 ... b_l <SEP> p_1 ... p_l``: parity of ``l`` bits, with the running parity
``p_i = b_1 xor ... xor b_i`` written as a scratchpad (its own tokens P0/P1) and learned by next-token prediction;
``p_l`` is the answer. Each scratchpad token depends on two tokens (``p_{i-1}`` and ``b_i``): sparse. Where ``b_i`` sits
relative to ``p_{i-1}`` depends on ``l`` with plain position ids (``l`` tokens back), so the dependency is not local;
*position coupling* (Cho et al. 2024, as Golowich et al. use it for this task) gives ``b_i`` and ``p_i`` the same
position id ``i`` (``<BOS>`` and ``<SEP>`` id 0), so that ``b_i`` is always at relative id +1 from the query
``p_{i-1}`` whatever ``l`` is. ``mode="direct"`` is the baseline without a scratchpad (the label at ``<SEP>``).
Test answers are decoded greedily, token by token, from the model's own scratchpad.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn

from ..models import SyntheticTransformer
from .positions import PES_WITH_POSITION_IDS, check_position_scheme, pose_ids
from .probe_training import ProbeSettings, accuracy, fit

S_BOS, S_SEP, S_PAD, B0, B1, P0, P1 = range(7)
SCRATCH_VOCAB = P1 + 1
SCRATCH_MODES = ("scratchpad", "direct")


def make_scratchpad_batch(lengths: torch.Tensor, generator: torch.Generator):
    """Parity-with-scratchpad batch.

    Returns ``tokens [b, 2*max(l)+2]`` = ``<BOS> b_1..b_l <SEP> p_1..p_l`` right-padded with S_PAD, ``bits [b, max(l)]``
    (0/1, 0 past ``l``), ``running [b, max(l)]`` (prefix parity, 0 past ``l``), ``target [b]`` (= parity of all bits).
    """
    lengths = torch.as_tensor(lengths)
    if bool((lengths < 1).any()):
        raise ValueError(f"every length must be >= 1; got {lengths.min().item()}")
    b, L = lengths.numel(), int(lengths.max())
    valid = torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)
    bits = torch.randint(0, 2, (b, L), generator=generator) * valid
    running = bits.cumsum(1) % 2 * valid
    tokens = torch.full((b, 2 * L + 2), S_PAD, dtype=torch.long)
    tokens[:, 0] = S_BOS
    rows = torch.arange(b).unsqueeze(1)
    i = torch.arange(L).unsqueeze(0).expand(b, L)
    # bit i (0-based) at 1+i, SEP at l+1, scratch token i at l+2+i; invalid slots written to a dummy column, then padded
    tokens[rows, torch.where(valid, 1 + i, 2 * L + 1)] = torch.where(valid, B0 + bits, S_PAD)
    tokens[torch.arange(b), lengths + 1] = S_SEP
    tokens[rows, torch.where(valid, lengths.unsqueeze(1) + 2 + i, 2 * L + 1)] = torch.where(valid, P0 + running, S_PAD)
    target = running[torch.arange(b), lengths - 1]
    return tokens, bits, running, target


def scratchpad_position_ids(lengths: torch.Tensor, s: int, scheme: str, max_pos: int,
                            generator: Optional[torch.Generator], n_tok: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[b, s]`` ids for ``<BOS> b_1..b_l <SEP> p_1..p_l`` (right-padded): plain 0..s-1; ``pose`` random two-chunk
    shift during training (``generator`` given; over the first ``n_tok`` tokens, default ``2l+2``), plain at test;
    ``couple``: BOS 0, b_i -> i, SEP 0, p_i -> i (padding 0), plus one random offset per sample during training."""
    check_position_scheme(scheme)
    lengths = torch.as_tensor(lengths)
    b = lengths.numel()
    base = torch.arange(s).expand(b, s).clone()
    if scheme == "couple":
        l = lengths.unsqueeze(1)
        ids = torch.where(base <= l, base, base - l - 1)  # bits keep 1..l; SEP -> 0; p_i (at l+1+i) -> i
        ids = torch.where(ids > l, torch.zeros_like(ids), ids)  # padding past 2l+1 -> 0
        if generator is not None:
            # training: every id of a sample shifted by one random offset (Cho et al.), so that a learned position
            # table is trained up to max_pos; a no-op for RoPE, which only sees id differences
            if int(lengths.max()) >= max_pos:
                raise ValueError(f"coupled ids of l={int(lengths.max())} bits do not fit max_pos={max_pos}")
            off = (torch.rand(b, generator=generator) * (max_pos - lengths).double()).long().unsqueeze(1)
            ids = torch.where(base < 2 * l + 2, ids + off, ids)
        return ids
    if scheme == "pose" and generator is not None:
        return pose_ids(2 * lengths + 2 if n_tok is None else n_tok, s, max_pos, generator)
    return base


@dataclass
class ScratchpadConfig(ProbeSettings):
    """One parity run with (``mode="scratchpad"``) or without (``"direct"``) a scratchpad; training lengths
    ``l ~ U{1..l_train}``, test every ``l`` in ``test_ls`` (greedy decoding of the scratchpad)."""

    mode: str = "scratchpad"
    pe: str = "rope"
    positions: str = "plain"
    l_train: int = 10
    test_ls: tuple = (5, 10, 20, 30, 40)

    def validate(self) -> None:
        if self.mode not in SCRATCH_MODES:
            raise ValueError(f"mode={self.mode!r} is unknown; accepted: {', '.join(SCRATCH_MODES)}")
        check_position_scheme(self.positions, self.pe)
        if self.positions == "couple" and self.mode != "scratchpad":
            raise ValueError("positions='couple' couples scratchpad tokens to bits: it needs mode='scratchpad'")
        if self.l_train < 1:
            raise ValueError(f"l_train={self.l_train} must be >= 1")


def _model_ids(cfg: ScratchpadConfig, lengths, s: int, max_pos: int, g: Optional[torch.Generator]):
    """The ids ``cfg``'s model reads (None for encodings without ids); ``g`` None gives test-time ids."""
    if cfg.pe not in PES_WITH_POSITION_IDS:
        return None
    n_tok = lengths + 2 if cfg.mode == "direct" else None
    return scratchpad_position_ids(lengths, s, cfg.positions, max_pos, g, n_tok)


@torch.no_grad()
def decode_scratchpad(model: nn.Module, cfg: ScratchpadConfig, prompt: torch.Tensor, l: int, max_pos: int):
    """Greedy decoding of ``l`` scratchpad tokens after ``prompt [b, l+2]`` (``<BOS> bits <SEP>``); returns the
    generated tokens ``[b, l]``. Position ids are those of the full sequence (coupled ids are known in advance)."""
    b = prompt.shape[0]
    ids = _model_ids(cfg, torch.full((b,), l), 2 * l + 2, max_pos, None)
    seq = prompt
    for _ in range(l):
        s = seq.shape[1]
        logits = model(seq, torch.full((b,), s - 1), None if ids is None else ids[:, :s])
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], 1)
    return seq[:, l + 2 :]


def _max_pos(cfg: ScratchpadConfig) -> int:
    """Position-table size: the longest sequence, training or test, ``2l + 2`` tokens."""
    return 2 * max(max(cfg.test_ls), cfg.l_train) + 2


def train_scratchpad(cfg: ScratchpadConfig) -> Dict:
    """Next-token cross-entropy on the scratchpad (or on the answer at ``<SEP>`` for ``direct``); returns config,
    final train loss, test accuracy: ``"answer,l"`` (final parity right) and ``"exact,l"`` (whole scratchpad right),
    both decoded greedily, and for the scratchpad mode ``step_acc[l][j-1]``: teacher-forced accuracy of step j."""
    cfg.validate()
    t0 = time.time()
    g = cfg.train_generator()
    max_pos = _max_pos(cfg)
    model = SyntheticTransformer(pe=cfg.pe, dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                                 max_len=max_pos, vocab_size=SCRATCH_VOCAB, out_dim=SCRATCH_VOCAB)

    def step_loss() -> torch.Tensor:
        ls = torch.randint(1, cfg.l_train + 1, (cfg.batch_size,), generator=g)
        tok, _, _, target = make_scratchpad_batch(ls, g)
        if cfg.mode == "direct":
            n = int(ls.max()) + 2
            out = model(tok[:, :n], ls + 1, _model_ids(cfg, ls, n, max_pos, g))
            return nn.functional.cross_entropy(out, P0 + target)
        ids = _model_ids(cfg, ls, tok.shape[1], max_pos, g)
        logits = model(tok[:, :-1], None, None if ids is None else ids[:, :-1])
        labels = tok[:, 1:].clone()
        labels[(labels != P0) & (labels != P1)] = -100  # loss on scratchpad tokens only
        return nn.functional.cross_entropy(logits.reshape(-1, SCRATCH_VOCAB), labels.reshape(-1))

    final_loss = fit(model, cfg.lr, cfg.max_steps, step_loss)
    acc, step_acc = score_scratchpad(model, cfg)
    out = {"config": asdict(cfg), "final_train_loss": final_loss, "acc": acc, "seconds": time.time() - t0}
    if step_acc:
        out["step_acc"] = step_acc
    return out


@torch.no_grad()
def score_scratchpad(model: nn.Module, cfg: ScratchpadConfig) -> Tuple[Dict, Dict]:
    """Test accuracies of ``model`` (tokens, read positions, ids -> next-token logits): ``acc`` (``"answer,l"``,
    ``"exact,l"``) and ``step_acc`` (see ``train_scratchpad``; empty for the direct mode), on ``cfg.test_n`` fresh
    inputs per test length, the same for every run of one seed."""
    max_pos = _max_pos(cfg)
    acc, step_acc = {}, {}
    gt = cfg.test_generator()
    model.eval()
    for l in cfg.test_ls:
        ls = torch.full((cfg.test_n,), l)
        tok, _, running, target = make_scratchpad_batch(ls, gt)
        prompt = tok[:, : l + 2]
        if cfg.mode == "direct":
            pred = model(prompt, ls + 1, _model_ids(cfg, ls, l + 2, max_pos, None)).argmax(-1)
            acc[f"answer,{l}"] = accuracy(pred, P0 + target)
            continue
        gen = decode_scratchpad(model, cfg, prompt, l, max_pos)
        acc[f"answer,{l}"] = accuracy(gen[:, -1], P0 + target)
        acc[f"exact,{l}"] = float((gen == P0 + running).all(1).double().mean())
        # teacher-forced: is step j right when p_1..p_{j-1} are the true ones? (where along the pad it breaks)
        ids = _model_ids(cfg, ls, 2 * l + 2, max_pos, None)
        logits = model(tok[:, :-1], None, None if ids is None else ids[:, :-1])
        step_acc[str(l)] = (logits[:, l + 1 :].argmax(-1) == tok[:, l + 2 :]).double().mean(0).tolist()
    return acc, step_acc
