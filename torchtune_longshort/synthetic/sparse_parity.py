"""Beyond the paper: sparse parity, the sparsity probe of length generalization (Golowich et al. 2025), CPU-sized.

Input ``<BOS> J_1 t_1 ... J_l t_l <SEP>``: ``l`` pairs of an index token ``J_i`` in ``{1..N}`` (N = 20) and a bit
``t_i``. Exactly ``k`` of the ``J_i`` are ``<= N/2`` ("selected"); the target, read at ``<SEP>``, is the parity (XOR)
of the bits of the selected pairs. ``k`` is the task's sparsity: the answer depends on ``k`` tokens however long the
input is. Golowich et al. predict that a transformer trained on short inputs generalizes to much longer ones when
``k`` is small, and fails for ``k_test > K_train``.

Position ids (only used by the RoPE model):

- ``"plain"``: 0..s-1.
- ``"pose"``: PoSE-style (Zhu et al. 2024) during training: the sequence is cut into two chunks at a random point and
  the second chunk's ids are shifted by a random offset, so that short training inputs cover the position ids of the
  longest test input. Test inputs always use 0..s-1.
- ``"couple"``: position coupling: ``J_i`` and ``t_i`` share the id ``i`` (BOS 0, SEP l+1), so the id counts pairs.
"""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from .models import SyntheticTransformer

BIT0, BIT1, BOS, SEP, PAD = 0, 1, 2, 3, 4
POSITION_SCHEMES = ("plain", "pose", "couple")


def index_token(j: torch.Tensor) -> torch.Tensor:
    """Token id of index ``j`` (1-based)."""
    return j + PAD


def vocab_size(N: int) -> int:
    return PAD + N + 1


def make_parity_batch(lengths: torch.Tensor, ks: torch.Tensor, N: int, generator: torch.Generator):
    """Sparse-parity batch.

    Args:
        lengths: ``[b]`` number of pairs ``l`` per sample.  ks: ``[b]`` sparsity ``k`` (1 <= k <= l).  N: even index
        range.  generator: RNG.
    Returns:
        ``tokens [b, 2*max(l)+2]`` (right-padded), ``sep_pos [b]`` (= 2l+1), ``target [b]`` long (0/1),
        ``selected [b, max(l)]`` bool (which pairs are selected; for tests).
    """
    if N < 2 or N % 2:
        raise ValueError(f"N={N} must be an even number >= 2")
    lengths, ks = torch.as_tensor(lengths), torch.as_tensor(ks)
    if bool((ks < 1).any()) or bool((ks > lengths).any()):
        raise ValueError(f"every k must be in [1, l]; got k={ks.tolist()[:8]} for l={lengths.tolist()[:8]}")
    b, L = lengths.numel(), int(lengths.max())
    valid = torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)
    # k selected pairs among the l valid ones: the k smallest random keys
    keys = torch.where(valid, torch.rand(b, L, generator=generator), torch.full((b, L), 2.0))
    rank = keys.argsort(1).argsort(1)
    selected = rank < ks.unsqueeze(1)
    half = N // 2
    j_sel = torch.randint(1, half + 1, (b, L), generator=generator)
    j_oth = torch.randint(half + 1, N + 1, (b, L), generator=generator)
    J = torch.where(selected, j_sel, j_oth)
    t = torch.randint(0, 2, (b, L), generator=generator)
    tokens = torch.full((b, 2 * L + 2), PAD, dtype=torch.long)
    tokens[:, 0] = BOS
    pairs = torch.stack([index_token(J), t], 2).reshape(b, 2 * L)
    tokens[:, 1:-1] = torch.where(valid.repeat_interleave(2, 1), pairs, torch.full_like(pairs, PAD))
    sep_pos = 2 * lengths + 1
    tokens[torch.arange(b), sep_pos] = SEP
    target = ((t * selected).sum(1) % 2).long()
    return tokens, sep_pos, target, selected


def position_ids(lengths: torch.Tensor, s: int, scheme: str, max_pos: int, generator: torch.Generator | None):
    """``[b, s]`` position ids for a right-padded batch under ``scheme`` (see module doc); ``max_pos`` bounds them."""
    if scheme not in POSITION_SCHEMES:
        raise ValueError(f"position scheme={scheme!r} is unknown; accepted: {', '.join(POSITION_SCHEMES)}")
    b = lengths.numel()
    base = torch.arange(s).expand(b, s).clone()
    if scheme == "couple":
        # BOS 0, pair i (tokens 2i-1, 2i) -> i, SEP -> l+1; padding continues counting (never attended by SEP)
        return (base + 1) // 2
    if scheme == "pose" and generator is not None:
        return pose_ids(2 * lengths + 2, s, max_pos, generator)
    return base


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


@dataclass
class ProbeSettings:
    """Model size, training budget, test size and seed shared by the beyond-the-paper probes."""

    dim: int = 64
    num_layers: int = 2
    num_heads: int = 4
    batch_size: int = 128
    lr: float = 1e-3
    max_steps: int = 1500
    test_n: int = 256
    seed: int = 0


@dataclass
class ParityConfig(ProbeSettings):
    """One sparse-parity run. Training: l ~ U{l_min..l_train} pairs, k ~ U{1..k_train}; test: every l in
    ``test_ls`` and k in ``test_ks``."""

    N: int = 20
    l_train: int = 10
    k_train: int = 2
    pe: str = "rope"
    positions: str = "plain"
    test_ls: tuple = (5, 10, 20, 30, 40)
    test_ks: tuple = (1, 2, 3)

    def validate(self) -> None:
        if self.positions not in POSITION_SCHEMES:
            raise ValueError(f"positions={self.positions!r} is unknown; accepted: {', '.join(POSITION_SCHEMES)}")
        if self.positions != "plain" and self.pe not in ("rope", "learned"):
            raise ValueError(f"positions={self.positions!r} needs pe 'rope' or 'learned', got pe={self.pe!r}")
        if self.k_train < 1 or self.k_train > self.l_train:
            raise ValueError(f"k_train={self.k_train} must be in [1, l_train={self.l_train}]")
        if max(self.test_ks) > min(self.test_ls):
            raise ValueError(f"test_ks max {max(self.test_ks)} exceeds the shortest test length {min(self.test_ls)}")


def fit(model: nn.Module, lr: float, max_steps: int, step_loss: Callable[[], torch.Tensor]) -> float:
    """The beyond-the-paper training loop: AdamW (no weight decay), cosine lr from ``lr`` to 0 over ``max_steps``,
    ``step_loss()`` draws a fresh batch and returns its loss. Returns the mean loss of the last 50 steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in range(max_steps):
        for grp in opt.param_groups:
            grp["lr"] = 0.5 * lr * (1 + np.cos(np.pi * step / max_steps))
        model.train()
        loss = step_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return float(np.mean(losses[-50:]))


def train_parity(cfg: ParityConfig) -> Dict:
    """Train with cross-entropy at ``<SEP>``; returns config, final train loss, and test accuracy per (k, l)."""
    cfg.validate()
    t0 = time.time()
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    max_len = 2 * max(cfg.test_ls) + 2
    model = SyntheticTransformer(pe=cfg.pe, dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                                 max_len=max_len, vocab_size=vocab_size(cfg.N), out_dim=2)

    def step_loss() -> torch.Tensor:
        ks = torch.randint(1, cfg.k_train + 1, (cfg.batch_size,), generator=g)
        # l ~ U{k..l_train} given k
        ls = ks + (torch.rand(cfg.batch_size, generator=g) * (cfg.l_train - ks + 1).double()).long()
        tok, sep, y, _ = make_parity_batch(ls, ks, cfg.N, g)
        pos = position_ids(ls, tok.shape[1], cfg.positions, max_len, g) if cfg.pe in ("rope", "learned") else None
        return nn.functional.cross_entropy(model(tok, sep, pos), y)

    final_loss = fit(model, cfg.lr, cfg.max_steps, step_loss)
    acc = {}
    gt = torch.Generator().manual_seed(30_000 + cfg.seed)
    model.eval()
    with torch.no_grad():
        for k in cfg.test_ks:
            for l in cfg.test_ls:
                ls = torch.full((cfg.test_n,), l)
                tok, sep, y, _ = make_parity_batch(ls, torch.full((cfg.test_n,), k), cfg.N, gt)
                pos = position_ids(ls, tok.shape[1], cfg.positions, max_len, None) if cfg.pe in ("rope", "learned") else None
                acc[f"{k},{l}"] = float((model(tok, sep, pos).argmax(-1) == y).double().mean())
    return {"config": asdict(cfg), "final_train_loss": final_loss, "acc": acc,
            "seconds": time.time() - t0}


def _train_any(cfg) -> Dict:
    from .sparsity import PlantedConfig, ScratchpadConfig, train_planted, train_scratchpad

    if isinstance(cfg, PlantedConfig):
        return train_planted(cfg)
    if isinstance(cfg, ScratchpadConfig):
        return train_scratchpad(cfg)
    return train_parity(cfg)


def _worker(item) -> tuple:
    key, cfg = item
    torch.set_num_threads(1)
    return key, _train_any(cfg)


BEYOND_FIGURES = ("parity", "parity_pe", "planted", "scratchpad")
BEYOND_TITLES = {
    "parity": "Sparse parity: accuracy vs length, by K_train",
    "parity_pe": "Sparse parity (K_train=2): position schemes",
    "planted": "k-sparse planted correlations (sum mod q at <SEP>), RoPE",
    "scratchpad": "Parity of l bits: direct answer vs scratchpad, position ids",
}


def _sized(base, quick: bool):
    """``base`` as is, or its test-sized version (``--quick``): l_train 6, 40 steps, width 32, 3 test lengths."""
    return replace(base, l_train=6, max_steps=40, dim=32, test_ls=(3, 6, 12), test_n=64) if quick else base


def beyond_configs(name: str, quick: bool) -> List[tuple]:
    """(label, config) curves of a beyond-the-paper figure (configs are ParityConfig, PlantedConfig or
    ScratchpadConfig; seed 0)."""
    from .sparsity import PlantedConfig, ScratchpadConfig

    if name in ("parity", "parity_pe"):
        base = _sized(ParityConfig(), quick)
        if name == "parity":
            # sparsity: train on k <= K_train for K_train = 1, 2, 3; test k = 1..4 at every length
            return [(f"K_train={K}", replace(base, k_train=K, test_ks=(1, 2, 3, 4) if not quick else (1, 2, 3)))
                    for K in ((1, 2, 3) if not quick else (1, 2))]
        return [(label, replace(base, pe=pe, positions=p)) for label, pe, p in
                (("NoPE", "nope", "plain"), ("RoPE", "rope", "plain"), ("RoPE + PoSE", "rope", "pose"),
                 ("RoPE + coupling", "rope", "couple"))]
    if name == "planted":
        base = _sized(PlantedConfig(), quick)
        w = 4 if not quick else 3
        curves = [(f"k={k}, spread", replace(base, k=k)) for k in (1, 2, 3)]
        return curves + [(f"k={k}, window {w}", replace(base, k=k, window=w)) for k in (2, 3)]
    if name == "scratchpad":
        base = _sized(ScratchpadConfig(), quick)
        return [(label, replace(base, mode=mode, pe=pe, positions=p)) for label, mode, pe, p in
                (("no scratchpad, RoPE", "direct", "rope", "plain"),
                 ("scratchpad, RoPE", "scratchpad", "rope", "plain"),
                 ("scratchpad, RoPE + PoSE", "scratchpad", "rope", "pose"),
                 ("scratchpad, RoPE + coupling", "scratchpad", "rope", "couple"),
                 ("scratchpad, learned abs. + coupling", "scratchpad", "learned", "couple"))]
    raise ValueError(f"figure={name!r} is unknown; accepted: {', '.join(BEYOND_FIGURES)}")


def _run_key(cfg) -> str:
    return type(cfg).__name__ + json.dumps(asdict(cfg), sort_keys=True)


def run_beyond(names: Sequence[str], out_dir: str, quick: bool, seeds: Sequence[int], workers: int) -> Dict:
    """Train the curves of each figure over seeds; writes ``fig_<name>.csv``, ``fig_<name>.png`` and
    ``beyond_summary.json`` (merged with an earlier one in ``out_dir``, so figures can be run one at a time).
    Returns the summary."""
    from tqdm import tqdm

    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    curves = {n: beyond_configs(n, quick) for n in names}
    todo = {_run_key(replace(c, seed=s)): replace(c, seed=s) for cs in curves.values() for _, c in cs for s in seeds}
    results = {}
    if workers <= 1:
        for k, c in tqdm(todo.items(), desc="beyond runs"):
            results[k] = _train_any(c)
    else:
        ctx = torch.multiprocessing.get_context("spawn")
        with ctx.Pool(workers) as pool:
            for k, r in tqdm(pool.imap_unordered(_worker, list(todo.items())), total=len(todo), desc="beyond runs"):
                results[k] = r
    path = os.path.join(out_dir, "beyond_summary.json")
    summary: Dict = {}
    if os.path.exists(path):
        with open(path) as fh:
            summary = json.load(fh)
    meta = summary.setdefault("meta", {})
    for n, cs in curves.items():
        table = {}
        with open(os.path.join(out_dir, f"fig_{n}.csv"), "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["figure", "curve", "seed", "group", "l_test", "accuracy"])
            for label, c in cs:
                rs = [results[_run_key(replace(c, seed=s))] for s in seeds]
                for s, r in zip(seeds, rs):
                    for key, a in r["acc"].items():
                        grp, l = key.split(",")
                        w.writerow([n, label, s, grp, l, f"{a:.4f}"])
                table[label] = {"l_train": c.l_train, "k_train": getattr(c, "k_train", getattr(c, "k", None)),
                                "acc_mean": {key: float(np.mean([r["acc"][key] for r in rs])) for key in rs[0]["acc"]},
                                "acc_min": {key: float(np.min([r["acc"][key] for r in rs])) for key in rs[0]["acc"]},
                                "final_train_loss": [r["final_train_loss"] for r in rs],
                                "seconds": [r["seconds"] for r in rs], "chance": 1.0 / getattr(c, "q", 2)}
                if "step_acc" in rs[0]:
                    table[label]["step_acc_mean"] = {l: np.mean([r["step_acc"][l] for r in rs], 0).tolist()
                                                     for l in rs[0]["step_acc"]}
        summary[n] = table
        (_plot_beyond if n in ("parity", "parity_pe") else _plot_lines)(n, table, os.path.join(out_dir, f"fig_{n}.png"))
    # one entry per invocation (keyed by its figures): the file merges several runs of the command
    from torchtune_longshort.provenance import provenance

    meta[",".join(names)] = {"quick": quick, "seeds": list(seeds), "workers": workers,
                             "wall_seconds": time.time() - t0, "provenance": provenance(device="cpu", stdlib=False)}
    with open(path, "w") as fh:
        json.dump(summary, fh, indent=1)
    return summary


def _style(ax, title: str, xlabel: str, y_low: float, l_train: int, chance: Optional[float]) -> None:
    ax.axvline(l_train, color="grey", ls=":", lw=0.8)
    if chance is not None:
        ax.axhline(chance, color="k", lw=0.5, ls="--")
    ax.set_title(title, fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylim(y_low, 1.02)
    ax.grid(alpha=0.3, lw=0.5)
    ax.legend(fontsize=6)


def _finish(fig, axes, name: str, path: str) -> None:
    import matplotlib.pyplot as plt

    axes[0][0].set_ylabel("accuracy")
    fig.suptitle(BEYOND_TITLES[name], fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_lines(name: str, table: Dict, path: str) -> None:
    """Planted: a panel per placement (spread / window), a line per k. Scratchpad: a panel per metric (final answer,
    whole scratchpad), a line per curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: Dict[str, List] = {}
    for label, d in table.items():
        if name == "planted":
            k, placement = label.split(", ")
            panels.setdefault(placement, []).append((k, d["acc_mean"], d["l_train"]))
        else:
            for metric, title in (("answer", "final answer"), ("exact", "whole scratchpad")):
                pts = {key: v for key, v in d["acc_mean"].items() if key.startswith(metric + ",")}
                if pts:
                    panels.setdefault(title, []).append((label, pts, d["l_train"]))
    names = list(dict.fromkeys(line for lines in panels.values() for line, _, _ in lines))
    colors = {line: f"C{i}" for i, line in enumerate(names)}  # one colour per line across panels
    chance = next(iter(table.values())).get("chance", 0.5)
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.0), dpi=90, sharey=True, squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels.items()):
        for line, acc, l_train in lines:
            pts = sorted((int(key.split(",")[1]), v) for key, v in acc.items())
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, lw=1.2, label=line, color=colors[line])
        _style(ax, title, "test length l", -0.02, lines[0][2], chance if title != "whole scratchpad" else None)
    _finish(fig, axes, name, path)


def _plot_beyond(name: str, table: Dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(table)
    fig, axes = plt.subplots(1, len(labels), figsize=(2.6 * len(labels), 2.8), dpi=90, sharey=True, squeeze=False)
    for ax, label in zip(axes[0], labels):
        d = table[label]
        ks = sorted({int(k.split(",")[0]) for k in d["acc_mean"]})
        for k in ks:
            pts = sorted((int(key.split(",")[1]), v) for key, v in d["acc_mean"].items() if int(key.split(",")[0]) == k)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, lw=1.2,
                    label=f"k={k}" + (" (> K_train)" if k > d["k_train"] else ""))
        _style(ax, label, "test pairs l", 0.4, d["l_train"], 0.5)
    _finish(fig, axes, name, path)
