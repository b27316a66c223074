"""Fused output projection + cross-entropy + divergence for :class:`LongShortLoss`'s hidden-state path.

One :class:`torch.autograd.Function` does, per chunk of the shared target index (:mod:`.chunking`):

1. project the chunk's hidden states of both windows with the output weight (one matmul);
2. take float32 log-softmaxes (the model may run in bfloat16);
3. compute the cross-entropy values, the divergence values at the chunk's aligned pairs, and the *analytic*
   gradient of ``loss = (ce_A + ce_B) / 2 + alpha * D`` with respect to the chunk's logits;
4. turn that into the gradients w.r.t. the chunk's hidden states (``dlogits @ W``) and the output weight
   (``dlogits^T @ h``, accumulated over chunks) and drop the logits.

Backward only scales the stored gradients by ``grad_output``. Nothing of size ``[rows, vocab]`` outlives a chunk and
no logits are recomputed: one projection forward and its two gradient matmuls, as in Liger-Kernel's fused linear
cross-entropy, extended to the two-window divergence.

The divergences' logit gradients, block by block over the aligned pairs: :mod:`.pair_gradients`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from torchtune_longshort.loss.chunking import TargetChunk
from torchtune_longshort.loss.pair_gradients import PAIR_BLOCK_SPLIT, block_fn, value_affine


# ---------------------------------------------------------------------------------------------- the computation
@dataclass(frozen=True)
class FusedPlan:
    """What the fused function needs besides tensors (all fixed before the first chunk).

    ``mode``: ``"train"`` (divergence with gradient), ``"report"`` (its value only, for logging) or ``None``.
    ``w_div``: ``alpha / (batch * n_aligned)``, the weight of one position's divergence in the loss.
    """

    chunks: Tuple[TargetChunk, ...]
    divergence: str
    mode: Optional[str]
    stop_grad_long: bool
    ignore_index: int
    w_div: float


class ChunkWorkspace:
    """The ``[rows, vocab]`` buffers of one call's chunks (float32 log-probabilities; probabilities, which first
    hold float32 logits; logits of another dtype), allocated once at the largest chunk and reused by every chunk.

    Each chunk's buffers are tens of MiB at a real vocabulary (300 rows x 32k x 4 bytes = 38 MB). On a CPU, glibc's
    malloc serves blocks that large with a fresh ``mmap`` and unmaps them on free, so new buffers for every chunk
    cost a page fault per 4 KiB page each time: about an eighth of the fused loss's time at the 1B-ratio CPU shape.
    The buffers are dropped at the end of the call, so the model's backward pass never holds them (peak memory as
    without reuse); a GPU's caching allocator reuses blocks anyway.
    """

    def __init__(self):
        self._bufs: Dict[str, torch.Tensor] = {}

    def get(self, name: str, rows: int, cols: int, dtype: torch.dtype, device, reserve: int = 0) -> torch.Tensor:
        """A ``[rows, cols]`` view of buffer ``name``, grown (never shrunk) to fit; a new buffer gets at least
        ``reserve`` rows."""
        buf = self._bufs.get(name)
        if buf is None or buf.dtype != dtype or buf.shape[1] != cols or buf.shape[0] < rows:
            buf = self._bufs[name] = None  # the old one goes before the new one comes
            buf = self._bufs[name] = torch.empty(max(rows, reserve, 1), cols, dtype=dtype, device=device)
        return buf[:rows]

    def release(self) -> None:
        self._bufs.clear()


def _row_order(chunks, bsz: int, L: int, device) -> torch.Tensor:
    """Row index into ``cat([ha, hb])`` flattened to ``[2 b L]``, in chunk order: each chunk's A rows (batch-major),
    then its B rows, so every chunk is one contiguous block."""
    idx = []
    for c in chunks:
        for base, lo, hi in ((0, c.a_lo, c.a_hi), (bsz * L, c.b_lo, c.b_hi)):
            if hi > lo:
                idx.append((base + torch.arange(bsz)[:, None] * L + torch.arange(lo, hi)[None, :]).reshape(-1))
    return torch.cat(idx).to(device)


class _FusedPass:
    """One :func:`fused_terms` call: the rows of both windows laid out once in chunk order (:func:`_row_order`, so
    a chunk is a slice, not a gather) and the buffers every chunk writes its values and gradients into."""

    def __init__(self, ha, hb, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan: FusedPlan, grads):
        self.bsz, self.L, d = ha.shape
        self.weight, self.bias, self.plan, self.grads = weight, bias, plan, grads
        self.workspace = ChunkWorkspace()
        self._logits_buffer = "p" if weight.dtype == torch.float32 else "logits"
        self.V = weight.shape[0]
        self.dev = dev = ha.device
        self.n_rows = n_rows = self.bsz * self.L
        self.any_grad = any(grads)
        self.want_div_b = plan.mode == "train" and self.any_grad
        self.want_div_a = self.want_div_b and not plan.stop_grad_long

        self.order = _row_order(plan.chunks, self.bsz, self.L, dev)
        # every chunk's [rows, vocab] buffers are allocated once, at the largest chunk: grown chunk by chunk (the
        # first chunks of the L + e positions hold window A's rows alone), each larger buffer came while the
        # smaller one was still held
        self.max_rows = max((self.bsz * (c.n_a + c.n_b) for c in plan.chunks), default=1)
        self._block_fn = block_fn(plan.divergence) if plan.mode is not None else None
        widest = max((max(c.n_a, c.n_b) for c in plan.chunks), default=1)
        self.pair_block = max(1, math.ceil(widest / PAIR_BLOCK_SPLIT))  # pairs per block (per sequence)
        self.h_all = torch.cat([ha.reshape(n_rows, d), hb.reshape(n_rows, d)]).index_select(0, self.order)
        y_all = torch.cat([labels_a.reshape(-1), labels_b.reshape(-1)])[self.order]
        valid = y_all != plan.ignore_index
        self.y_all = torch.where(valid, y_all, torch.zeros_like(y_all))[:, None]
        is_a = self.order < n_rows
        self.mask_a = (valid & is_a).to(torch.float32)
        self.mask_b = (valid & ~is_a).to(torch.float32)
        self.tgt_lp = torch.empty(2 * n_rows, 1, dtype=torch.float32, device=dev)  # log p(target) per row
        self.n_pair_rows = sum(self.bsz * c.n_pairs for c in plan.chunks) if plan.mode is not None else 0
        self.div_v = torch.empty(self.n_pair_rows, 1, dtype=torch.float32, device=dev)
        if self.any_grad:
            self.row_w = (self.mask_a * w_ce_a + self.mask_b * w_ce_b)[:, None]  # dloss/dlogit scale of each CE
            self.neg_row_w = -self.row_w
        self.gh_all = torch.empty(2 * n_rows, d, dtype=ha.dtype, device=dev) if (grads[0] or grads[1]) else None
        self.g_w = None
        self.g_bias = torch.zeros(self.V, dtype=torch.float32, device=dev) if (grads[3] and bias is not None) else None

    def run(self):
        """All chunks, then :meth:`results`."""
        off = p_off = 0
        try:
            for c in self.plan.chunks:
                rows = slice(off, off + self.bsz * (c.n_a + c.n_b))
                off = rows.stop
                dlog_w, p_off = self._chunk_logit_grads(c, rows, p_off)
                if dlog_w is not None:
                    self._project_chunk_grads(dlog_w, rows)
        finally:
            self.workspace.release()
        return self.results()

    def _chunk_logit_grads(self, c: TargetChunk, rows: slice, p_off: int):
        """Chunk ``c``'s logits, target log-probabilities and pair divergences; returns (dloss/dlogits in the
        weight's dtype, or ``None`` when no gradient is asked) and the next offset into the pair values."""
        bsz, V, plan = self.bsz, self.V, self.plan
        ra = bsz * c.n_a
        n_rows, ws, h = rows.stop - rows.start, self.workspace, self.h_all[rows]
        # float32 logits go where the probabilities will (they are dead once the log-softmax is taken): two
        # [rows, vocab] buffers in all, as many as the unfused chunk holds at its peak
        logits = ws.get(self._logits_buffer, n_rows, V, self.weight.dtype, self.dev, self.max_rows)
        if self.bias is None:
            torch.mm(h, self.weight.t(), out=logits)
        else:
            torch.addmm(self.bias, h, self.weight.t(), out=logits)
        lp = ws.get("lp", n_rows, V, torch.float32, self.dev, self.max_rows)
        if logits.dtype != torch.float32:
            # float32 log-softmax of bf16 logits: log_softmax(dtype=float32) would upcast into a temporary
            # [rows, vocab] float32 tensor (a third buffer, +40% of the chunk's at the 1B / 105k GPU step); the
            # probabilities' buffer is free until exp below and takes the upcast instead
            logits = ws.get("p", n_rows, V, torch.float32, self.dev, self.max_rows).copy_(logits)
        torch.log_softmax(logits, dim=-1, out=lp)
        del logits
        torch.gather(lp, 1, self.y_all[rows], out=self.tgt_lp[rows])
        pairs = plan.mode is not None and c.n_pairs > 0
        if not (self.any_grad or pairs):
            return None, p_off
        p = torch.exp(lp, out=ws.get("p", n_rows, V, torch.float32, self.dev, self.max_rows))
        # [b, n_A, V] / [b, n_B, V] views of the chunk's A and B rows (batch-major, A first: _row_order)
        win_a = lambda t: t[:ra].view(bsz, c.n_a, t.shape[-1])  # noqa: E731
        win_b = lambda t: t[ra:].view(bsz, c.n_b, t.shape[-1])  # noqa: E731
        wrote = (False, False)
        if pairs:
            wrote = self._pair_blocks(c, win_a, win_b, lp, p, rows, p_off)
            p_off += bsz * c.n_pairs
        if not self.any_grad:
            return None, p_off
        # dloss/dlogits: the CE's w * (p - onehot(y)) for every row (the pair rows already hold theirs, plus the
        # divergence's), written over lp (no longer needed)
        row_w = self.row_w[rows]
        for win, lo, hi, done in ((win_a, c.pair_a, c.pair_a + c.n_pairs, wrote[0]),
                                  (win_b, c.pair_b, c.pair_b + c.n_pairs, wrote[1])):
            for sl in ((slice(0, lo), slice(hi, None)) if done else (slice(None),)):
                torch.mul(win(p)[:, sl], win(row_w)[:, sl], out=win(lp)[:, sl])
        dlog = lp
        dlog.scatter_add_(1, self.y_all[rows], self.neg_row_w[rows])
        del p, lp
        if self.g_bias is not None:
            self.g_bias += dlog.sum(0)
        if dlog.dtype == self.weight.dtype:
            return dlog, p_off
        # the logits buffer (weight dtype) is free again: the cast goes there
        return self.workspace.get(self._logits_buffer, dlog.shape[0], V, self.weight.dtype, self.dev).copy_(dlog), p_off

    def _pair_blocks(self, c: TargetChunk, win_a, win_b, lp, p, rows: slice, p_off: int):
        """Chunk ``c``'s aligned pairs, block by block (:data:`PAIR_BLOCK_SPLIT`): their divergence values into
        ``div_v`` and, when trained, their rows' dloss/dlogits (CE one-hot aside) over ``lp``.
        ``(wrote_a, wrote_b)``."""
        bsz, V, n, plan = self.bsz, self.V, c.n_pairs, self.plan
        block = self._block_fn
        out_v = self.div_v[p_off : p_off + bsz * n].view(bsz, n, 1)
        row_w = self.row_w[rows] if self.any_grad else None
        wrote = (False, False)
        for k0 in range(0, n, self.pair_block):
            k1 = min(n, k0 + self.pair_block)
            ia, ib = slice(c.pair_a + k0, c.pair_a + k1), slice(c.pair_b + k0, c.pair_b + k1)
            tmp = self.workspace.get("pair", bsz * (k1 - k0), V, torch.float32, self.dev).view(bsz, k1 - k0, V)
            wrote = block(win_a(lp)[:, ia], win_b(lp)[:, ib], win_a(p)[:, ia], win_b(p)[:, ib], out_v[:, k0:k1], tmp,
                          self.want_div_a, self.want_div_b, plan.w_div,
                          win_a(row_w)[:, ia] if row_w is not None else None,
                          win_b(row_w)[:, ib] if row_w is not None else None)
        return wrote

    def _project_chunk_grads(self, dlog_w: torch.Tensor, rows: slice) -> None:
        """dloss/dlogits of a chunk -> its hidden states' gradient and the output weight's (accumulated)."""
        h = self.h_all[rows]
        if self.grads[2]:
            # accumulated in the weight's dtype, as autograd accumulates the unfused path's per-chunk gradients
            self.g_w = dlog_w.t().mm(h) if self.g_w is None else self.g_w.addmm_(dlog_w.t(), h)
        if self.gh_all is not None:
            torch.mm(dlog_w, self.weight, out=self.gh_all[rows])

    def results(self):
        """``(ce_a_sum, ce_b_sum, div_sum)`` and ``[grad_ha, grad_hb, grad_weight, grad_bias]`` (rows restored)."""
        bsz, L, n_rows, dev = self.bsz, self.L, self.n_rows, self.dev
        ce_a = -(self.tgt_lp[:, 0] @ self.mask_a)
        ce_b = -(self.tgt_lp[:, 0] @ self.mask_b)
        if self.n_pair_rows:
            scale, shift = value_affine(self.plan.divergence)
            div = self.div_v.sum() * scale + shift * self.n_pair_rows
        else:
            div = torch.zeros((), dtype=torch.float32, device=dev)
        g_ha = g_hb = None
        if self.gh_all is not None:
            inverse = torch.empty_like(self.order)
            inverse[self.order] = torch.arange(self.order.numel(), device=dev)
            g_all = self.gh_all.index_select(0, inverse)
            self.gh_all = None
            d = g_all.shape[1]
            g_ha = g_all[:n_rows].view(bsz, L, d) if self.grads[0] else None
            g_hb = g_all[n_rows:].view(bsz, L, d) if self.grads[1] else None
        g_w = self.g_w
        if self.grads[2] and g_w is None:  # no rows at all
            g_w = torch.zeros_like(self.weight)
        g_bias = self.g_bias.to(self.bias.dtype) if self.g_bias is not None else None
        return (ce_a, ce_b, div), [g_ha, g_hb, g_w, g_bias]


def fused_terms(
    ha: torch.Tensor,
    hb: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    labels_a: torch.Tensor,
    labels_b: torch.Tensor,
    w_ce_a: torch.Tensor,
    w_ce_b: torch.Tensor,
    plan: FusedPlan,
    grads: Tuple[bool, bool, bool, bool],
):
    """Sums of the loss terms over all chunks, and the loss's gradients.

    Args:
        ha, hb: ``[b, L, d]`` final hidden states of windows A and B.
        weight, bias: the output projection (``[V, d]``, ``[V]`` or ``None``).
        labels_a, labels_b: ``[b, L]`` targets (``plan.ignore_index`` where none).
        w_ce_a, w_ce_b: 0-dim float32 weights of one target's CE in the loss (``1 / (2 n_A)``, ``1 / (2 n_B)``).
        plan: chunks and divergence settings.
        grads: which of ``(ha, hb, weight, bias)`` need a gradient.

    Returns:
        ``(ce_a_sum, ce_b_sum, div_sum)`` float32 0-dim tensors and ``[grad_ha, grad_hb, grad_weight, grad_bias]``
        (``None`` where not asked): the gradients of ``w_ce_a * ce_a_sum + w_ce_b * ce_b_sum + w_div * div_sum``
        (the divergence's part only in mode ``"train"``).
    """
    return _FusedPass(ha, hb, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan, grads).run()


class FusedLinearLongShort(torch.autograd.Function):
    """``loss = w_ce_a * sum ce_A + w_ce_b * sum ce_B [+ w_div * sum D]`` with gradients computed in forward.

    ``forward(ha, hb, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan)`` returns ``(loss, sums)``, ``sums``
    being the detached ``[ce_a_sum, ce_b_sum, div_sum]``. Backward scales the stored gradients by ``grad_output``.
    """

    @staticmethod
    def forward(ctx, ha, hb, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan: FusedPlan):
        need = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2],
                bias is not None and ctx.needs_input_grad[3])
        (ce_a, ce_b, div), grads = fused_terms(ha, hb, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan, need)
        loss = w_ce_a * ce_a + w_ce_b * ce_b
        if plan.mode == "train":
            loss = loss + plan.w_div * div
        sums = torch.stack([ce_a, ce_b, div])
        ctx.mark_non_differentiable(sums)
        ctx.grads = grads
        return loss, sums

    @staticmethod
    def backward(ctx, grad_loss, _grad_sums):
        grads, ctx.grads = ctx.grads, None  # hand the buffers over (autograd can then adopt them as .grad)
        out = []
        for g in grads:
            if g is not None:
                g.mul_(grad_loss.to(g.dtype))
            out.append(g)
        return (*out, None, None, None, None, None)
