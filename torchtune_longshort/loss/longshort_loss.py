"""``ce + alpha * misalignment`` over the two windows, computed chunk by chunk (paper Sec. 4).

Memory, not FLOPs, is the cost of the misalignment term: two windows of ``[b, L, vocab]`` float32 logits plus
their softmax intermediates. This loss never holds either window's logits whole:

- **hidden-state path** (preferred): call :meth:`LongShortLoss.set_model_output` once; the model then returns its
  final normed hidden states and the loss applies the output projection itself, one chunk of positions at a time
  (torchtune 0.6.1 has no ``LinearCrossEntropyLoss``, so we swap the decoder's ``unembed`` on the instance — its
  parameters and state-dict keys are untouched). Two ways to run it:

  - **fused** (default when the output is a plain linear layer, FSDP2-sharded or tied included): each chunk's
    logits, float32 log-softmaxes, CE and divergence values *and their gradients* w.r.t. the chunk's hidden states
    and the output weight are computed in the forward pass, and the logits dropped
    (:mod:`torchtune_longshort.loss.fused_linear`); backward only scales the stored gradients.
  - **checkpointed** (fallback for any other output module, e.g. LoRA on the output, or ``fused=False``): the output
    module is called as is under activation checkpointing, so each chunk's logits are recomputed in backward
    (:mod:`torchtune_longshort.loss.checkpointed_chunks`).

- **logits path**: a ``[b, L, vocab]`` tensor or the list of chunks that ``model.set_num_output_chunks(n)``
  produces. The float32 upcast, softmaxes and divergence are done per chunk, also under checkpointing.

Chunks run over the *shared target index* ``g`` of the ``L + e`` sample (window A's position ``g``, window B's
position ``g - e``), so every logit row is computed exactly once and each aligned pair lies in one chunk
(:mod:`torchtune_longshort.loss.chunking`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import torch
from torch import nn

from torchtune_longshort.hidden_states import enable_hidden_state_output, restore_logit_output
from torchtune_longshort.loss.checkpointed_chunks import checkpointed_terms, slice_parts
from torchtune_longshort.loss.chunking import target_chunks
from torchtune_longshort.loss.divergences import DEFAULT_DIVERGENCE, check_trainable, divergence_fn
from torchtune_longshort.loss.fused_linear import FusedLinearLongShort, FusedPlan, fused_terms
from torchtune_longshort.loss.pair_gradients import has_hand_written_gradient
from torchtune_longshort.loss.output_module import (
    callable_output, gathered, is_fsdp_module, plain_linear_weight,
)
from torchtune_longshort.windows import DEFAULT_MIN_CONTEXT, MinContext, aligned_positions, validate_min_context

logger = logging.getLogger(__name__)

Logits = Union[torch.Tensor, Sequence[torch.Tensor]]

# The paper's default weight of the misalignment term. The one default: a recipe config without ``loss.alpha`` trains
# with it, and the recipe's equal-compute decision reads it from here too.
DEFAULT_ALPHA = 0.1


def validate_alpha(alpha: object) -> float:
    """``alpha`` as a float, or ``ValueError`` naming it: a finite number >= 0 (not a bool). The one check of it:
    :class:`LongShortLoss` and the recipe's config check (``loss.alpha``) say these words."""
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha={alpha!r} must be a finite number >= 0")
    return float(alpha)


def validate_num_chunks(num_chunks: object) -> int:
    """``num_chunks``, or ``ValueError`` naming it: an int >= 1 (not a bool), as :func:`validate_alpha`."""
    if not isinstance(num_chunks, int) or isinstance(num_chunks, bool) or num_chunks < 1:
        raise ValueError(f"num_chunks={num_chunks!r} must be an int >= 1")
    return num_chunks


@dataclass
class LongShortLossOutput:
    """What :class:`LongShortLoss` returns: the loss to backpropagate and detached parts for logging."""

    loss: torch.Tensor
    ce: torch.Tensor
    ce_a: torch.Tensor
    ce_b: torch.Tensor
    misalignment: torch.Tensor
    num_aligned: int


class LongShortLoss(nn.Module):
    """Long-short alignment loss: ``(ce_A + ce_B) / 2 + alpha * D(A, B)``.

    Args:
        alpha: weight of the misalignment term (default :data:`DEFAULT_ALPHA`, the paper's 0.1; useful 0.1-0.3). ``0``
            is the plain cross-entropy baseline on exactly the same tokens (the divergence is still reported, see
            ``report_misalignment``).
        divergence: a name in :data:`~torchtune_longshort.loss.divergences.DIVERGENCES` (``"sce"``: paper Eq. 3), or
            the dotted path of a per-position function of one's own (``my_module.my_div``; :mod:`.own_divergence`).
        min_context: floor of the compared positions, see :mod:`torchtune_longshort.windows`.
        stop_grad_long: no gradient through window A (the longer contexts) in the misalignment term.
        num_chunks: number of chunks over the ``L + e`` shared positions.
        fused: on the hidden-state path, use the fused projection + CE + divergence (gradients computed in the
            forward pass, nothing recomputed) whenever the output module is a plain linear layer; ``False`` always
            takes the checkpointed path. See :attr:`output_path` for the path in use.
        recompute_logits: on the checkpointed and logits paths, recompute each chunk's logits in backward instead
            of keeping them.
        ignore_index: label value excluded from the cross-entropy.
        report_misalignment: at ``alpha = 0``, still compute the divergence for logging (from the logits each chunk
            computes anyway, without graph: no extra output projection). ``False`` reports 0 and skips the softmaxes.
    """

    def __init__(
        self,
        alpha: float = DEFAULT_ALPHA,
        divergence: str = DEFAULT_DIVERGENCE,
        min_context: MinContext = DEFAULT_MIN_CONTEXT,
        stop_grad_long: bool = False,
        num_chunks: int = 8,
        fused: bool = True,
        recompute_logits: bool = True,
        ignore_index: int = -100,
        report_misalignment: bool = True,
    ):
        super().__init__()
        validate_alpha(alpha)
        divergence_fn(divergence)  # raises with the accepted names
        check_trainable(divergence, alpha)
        validate_min_context(min_context)
        validate_num_chunks(num_chunks)
        self.alpha = float(alpha)
        self.divergence = divergence
        self.min_context = min_context
        self.stop_grad_long = stop_grad_long
        self.num_chunks = num_chunks
        self.fused = bool(fused)
        self.recompute_logits = recompute_logits
        self.ignore_index = ignore_index
        self.report_misalignment = report_misalignment
        self.linear_projection: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
        self._logged_path: Optional[str] = None

    # ------------------------------------------------------------------ model hook
    def set_model_output(self, model: nn.Module) -> None:
        """Make ``model`` return final (normed) hidden states; this loss applies ``model.output`` chunk-wise.

        Works for any torchtune ``TransformerDecoder`` (and its LoRA / FSDP-wrapped variants). A plain linear output
        (``nn.Linear``, FSDP2's sharded one, or a tied ``TiedLinear``) runs the fused path; any other output module
        is called as is on the checkpointed path, so LoRA on the output works unchanged. Undo with
        :func:`restore_model_output` (the swap itself is :mod:`torchtune_longshort.hidden_states`').
        """
        self.linear_projection = enable_hidden_state_output(model).output
        self._log_path(self.output_path)

    @property
    def output_path(self) -> str:
        """``"fused"``, ``"checkpointed"`` (hidden states, output module called per chunk) or ``"logits"``."""
        if self.linear_projection is None:
            return "logits"
        return "fused" if self._fusable() else "checkpointed"

    def _fusable(self) -> bool:
        # A DTensor weight is fused too: FSDP2 shards the output module itself (its hooks gather the weight for the
        # call and reduce-scatter the gradient), or holds a tied weight in another unit (`gathered` does both).
        return self.fused and plain_linear_weight(self.linear_projection) is not None

    def _projection(self):
        """The output module as the checkpointed path calls it: as is, or, for a plain linear output whose weight
        FSDP2 holds sharded outside the module's own unit (a tied embedding's), a linear over the gathered weight."""
        return callable_output(self.linear_projection)

    def _log_path(self, path: str) -> None:
        if path == self._logged_path:
            return
        self._logged_path = path
        what = {
            "fused": "fused linear + CE + divergence (gradients in the forward pass, no logits kept or recomputed)",
            "checkpointed": (
                "checkpointed chunks (output module called per chunk, logits "
                + ("recomputed in backward" if self.recompute_logits else "kept")
                + ("; fused=False" if not self.fused else "; the output module is not a plain linear layer")
                + ")"
            ),
            "logits": "logits given by the model (per-chunk float32 softmaxes)",
        }[path]
        mod = type(self.linear_projection).__name__ if self.linear_projection is not None else "-"
        logger.info("LongShortLoss path: %s [output module %s]", what, mod)
        note = self.gradient_note()
        if note:
            logger.info("LongShortLoss: %s", note)

    def gradient_note(self) -> Optional[str]:
        """On the fused path, for a divergence of one's own: the line saying that it runs the generic gradient."""
        if self.output_path != "fused" or has_hand_written_gradient(self.divergence):
            return None
        return (f"divergence {self.divergence} has no hand-written gradient: the fused path takes its logit gradients "
                "from autograd on each block of aligned pairs (generic, slower)")

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        out_a: Logits,
        out_b: Logits,
        labels_a: torch.Tensor,
        labels_b: torch.Tensor,
        e: int,
    ) -> LongShortLossOutput:
        """Compute the loss for one batch of dual-window samples.

        Args:
            out_a, out_b: window A's and B's model outputs: final hidden states ``[b, L, d]`` after
                :meth:`set_model_output`, else logits ``[b, L, vocab]`` or a list of sequence chunks of them.
            labels_a, labels_b: ``[b, L]`` next-token labels of each window (``ignore_index`` where none).
            e: the shift between the windows of this batch, in ``[1, L]``.
        """
        a_parts = list(out_a) if isinstance(out_a, (list, tuple)) else [out_a]
        b_parts = list(out_b) if isinstance(out_b, (list, tuple)) else [out_b]
        self._check_outputs("out_a", a_parts)
        self._check_outputs("out_b", b_parts)
        bsz = a_parts[0].shape[0]
        L = sum(p.shape[1] for p in a_parts)
        if sum(p.shape[1] for p in b_parts) != L:
            raise ValueError(
                f"window lengths differ: A has {L} positions, B has {sum(p.shape[1] for p in b_parts)}"
            )
        if b_parts[0].shape[0] != bsz:
            raise ValueError(f"batch sizes differ: out_a has {bsz} rows, out_b {b_parts[0].shape[0]} (the windows of "
                             "one batch of samples, row for row)")
        for name, lab in (("labels_a", labels_a), ("labels_b", labels_b)):
            if lab.shape != (bsz, L):
                raise ValueError(f"{name} has shape {tuple(lab.shape)}; expected [batch={bsz}, L={L}]")
            if lab.dtype != torch.long:
                raise ValueError(f"{name} has dtype {lab.dtype}; expected torch.long token ids (labels.long())")
        pos = aligned_positions(L, e, self.min_context)
        hidden = self.linear_projection is not None
        if hidden and self._fusable():
            width = plain_linear_weight(self.linear_projection)[0].shape[-1]
            if a_parts[0].shape[-1] != width or b_parts[0].shape[-1] != width:
                raise ValueError(f"out_a / out_b have last dimension {a_parts[0].shape[-1]} / {b_parts[0].shape[-1]} "
                                 f"but the output layer takes {width}: after set_model_output the model returns its "
                                 "hidden states and this loss applies the output layer; pass what the model returns")
        if not hidden and a_parts[0].shape[-1] != b_parts[0].shape[-1]:
            raise ValueError(
                f"vocab mismatch between windows: {a_parts[0].shape[-1]} vs {b_parts[0].shape[-1]}"
            )
        project = self._projection() if hidden else None

        n_a = (labels_a != self.ignore_index).sum()
        n_b = (labels_b != self.ignore_index).sum()
        with_div = self.alpha > 0 and pos.n > 0
        report_div = not with_div and self.report_misalignment and pos.n > 0
        mode = "train" if with_div else "report" if report_div else None
        chunks = target_chunks(L, e, pos, self.num_chunks)
        path = self.output_path
        if hidden:
            self._log_path(path)
        if path == "fused":
            ce_a, ce_b, div, loss = self._fused(slice_parts(a_parts, 0, L), slice_parts(b_parts, 0, L), labels_a,
                                                labels_b, n_a, n_b, pos, chunks, mode)
        else:
            ce_a, ce_b, div = checkpointed_terms(a_parts, b_parts, labels_a, labels_b, project, chunks, mode,
                                                 self.ignore_index, self.divergence, self.stop_grad_long,
                                                 self.recompute_logits)
            loss = None
        zero = torch.zeros((), device=labels_a.device)
        ce_a = (ce_a if ce_a is not None else zero) / n_a.clamp(min=1)
        ce_b = (ce_b if ce_b is not None else zero) / n_b.clamp(min=1)
        ce = (ce_a + ce_b) / 2
        if with_div:
            mis = div / (bsz * pos.n)
            loss = ce + self.alpha * mis if loss is None else loss
            mis_log = mis.detach()
        else:
            loss = ce if loss is None else loss
            mis_log = div.detach() / (bsz * pos.n) if (div is not None and mode is not None) else zero
        return LongShortLossOutput(
            loss=loss, ce=ce.detach(), ce_a=ce_a.detach(), ce_b=ce_b.detach(),
            misalignment=mis_log, num_aligned=pos.n,
        )

    def _check_outputs(self, name: str, parts: list) -> None:
        """Refuse a window output that is no float ``[batch, L, last]`` tensor (or list of sequence chunks of them)
        before torch meets it: token ids or a 2-D tensor failed deep in the cross-entropy, or named the labels."""
        what = ("[batch, L, dim] hidden states (set_model_output is on)" if self.linear_projection is not None
                else "[batch, L, vocab] logits, or a list of sequence chunks of them")
        if not parts:
            raise ValueError(f"{name} is an empty list: expected {what}")
        for i, part in enumerate(parts):
            label = name if len(parts) == 1 else f"{name}[{i}]"
            if not isinstance(part, torch.Tensor):
                raise TypeError(f"{label} is a {type(part).__name__}: expected {what} (for a Hugging Face model, "
                                "its output's .logits)")
            if part.dim() != 3:
                raise ValueError(f"{label} has shape {tuple(part.shape)}: expected {what}")
            if not part.is_floating_point():
                raise ValueError(f"{label} has dtype {part.dtype}: expected {what} in a floating dtype (token ids "
                                 "go to the model and the labels, not here)")

    # Under torch.compile the fused path runs eager (a graph break), as the recipe runs the whole loss: its kernels
    # write into preallocated out= buffers whose chunk sizes follow e, which dynamo's dynamic shapes refused
    # (TorchRuntimeError on gather(out=) at the second e) when a user compiled the loss.
    @torch.compiler.disable
    def _fused(self, ha, hb, labels_a, labels_b, n_a, n_b, pos, chunks, mode):
        """The fused path: ``(ce_a_sum, ce_b_sum, div_sum, loss)`` (sums detached; ``loss`` carries the gradients)."""
        bsz = ha.shape[0]
        plan = FusedPlan(
            chunks=tuple(chunks), divergence=self.divergence, mode=mode, stop_grad_long=self.stop_grad_long,
            ignore_index=self.ignore_index, w_div=self.alpha / (bsz * pos.n) if pos.n else 0.0,
        )
        w_ce_a = 0.5 / n_a.clamp(min=1).to(torch.float32)
        w_ce_b = 0.5 / n_b.clamp(min=1).to(torch.float32)
        module = self.linear_projection

        def run(ha_, hb_):
            weight, bias = (gathered(t) for t in plain_linear_weight(module))
            ha_, hb_, weight, bias = _one_dtype(ha_, hb_, weight, bias)
            with torch.autocast(ha_.device.type, enabled=False):  # the dtypes are settled: its kernels' out= buffers
                if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                                   for t in (ha_, hb_, weight, bias)):
                    return FusedLinearLongShort.apply(ha_, hb_, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b,
                                                      plan)
                (ca, cb, dv), _ = fused_terms(ha_, hb_, weight, bias, labels_a, labels_b, w_ce_a, w_ce_b, plan,
                                              (False, False, False, False))
            loss = w_ce_a * ca + w_ce_b * cb + (plan.w_div * dv if mode == "train" else 0.0)
            return loss, torch.stack([ca, cb, dv])

        if is_fsdp_module(module):
            # Run as the module's own forward, so FSDP2's hooks gather the sharded weight for this call, register
            # the reduce-scatter of its gradient, and gather it again for backward, exactly as for module(x).
            module.forward = run
            try:
                loss, sums = module(ha, hb)
            finally:
                del module.forward
        else:
            loss, sums = run(ha, hb)
        return sums[0], sums[1], sums[2], loss


def _one_dtype(ha: torch.Tensor, hb: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]):
    """The fused path's inputs in one dtype. Under ``torch.autocast``: its dtype, as ``model.output(h)`` would compute
    the logits (the float32 log-softmax and divergences follow either way). Without it they must agree already, as
    the model's own output layer needs."""
    device = ha.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        return tuple(None if t is None else t.to(dtype) for t in (ha, hb, weight, bias))
    if ha.dtype != weight.dtype or hb.dtype != weight.dtype:
        raise ValueError(f"the hidden states are {ha.dtype} (A) / {hb.dtype} (B) but the output weight is "
                         f"{weight.dtype}: cast the model to one dtype, or run its forward and this loss under "
                         "torch.autocast")
    return ha, hb, weight, bias


def restore_model_output(model: nn.Module) -> None:
    """Undo :meth:`LongShortLoss.set_model_output`: the model returns logits again."""
    restore_logit_output(model)
