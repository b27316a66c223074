"""CLEX (Chen et al. 2024, ICLR, "CLEX: Continuous length extrapolation for large language models").

The log inverse frequencies z(t) follow an ODE in the length-scaling factor t >= 1:

    dz/dt = g(z, t) = act((z + log theta_ntk(t)) W_up) W_down + d/dt log theta_ntk(t),    z(1) = log theta

where theta_ntk(t) are NTK-aware frequencies with alpha = 2t - 1 and the model's base (the released code's time
embedding, which takes base 10000 whatever the model's: the two agree for Llama-2; for another base, e.g. its
Mixtral's 1e6, the released ODE adds log theta_ntk of base 10000 to z inside act(); the d/dt term does not depend
on the base, so an untrained CLEX is the NTK path under both, and the learned dynamics differ). W_down
starts at zero, so an untrained CLEX follows the NTK path exactly: z(t) = log theta_ntk(t). The ODE is solved
in float32 with fixed-step RK4 (the released code uses torchdiffeq's ``rk4`` with ``step_size = time_dt``).

Training: t is an integer drawn from [t_min, t_max] (released: t_min = 1) once per forward pass, and the position
ids are a sorted random subset of ``[0, seq_len * t)`` divided by ``seq_len // L`` (kept first, and last as
``seq_len * t // (seq_len // L) - 1``) -- the released rule.
Inference: ``t = ceil(L_cur / L)`` capped at ``t_max``, with ``L_cur = max(position) + 1``.

q and k of every layer must see the same t and positions, so the draw happens once per model forward in
:meth:`CLEXRoPE.prepare`, which the decoder pre-hook installed by ``apply_rope_scaling`` calls; used on its own,
the module applies the inference rule to the length of each call. The draw comes from the module's ``generator``
when one is set (the recipe sets one generator, the same on every rank, so that every process of a run draws the
same t and positions), else from torch's global stream.

Several processes (FSDP2): the recipe leaves the ODE's two small weights out of the sharding and holds them as
replicated DTensors; the module computes with their local copies (:meth:`CLEXRoPE.ode_weights`) and the recipe
averages their gradients over the ranks after the backward pass.

Activation checkpointing re-runs each layer's forward during backward, after the decoder's post-hook has
cleared the state. :meth:`CLEXRoPE.clear` therefore keeps the last training forward's state (t, its ODE
solution with its autograd graph, the sampled positions) for such recomputations: a call made while a backward
pass is running and no forward is being prepared reuses it, so the recomputed layer sees what the original
forward saw. This serves the usual order -- each training forward's backward before the next training
forward (the recipe's, gradient accumulation included); a second training forward before the first one's
backward is not supported with checkpointing. Reentrant checkpointing (``use_reentrant=True``) is refused: it
runs the original layer forward without autograd and back-propagates each layer's recomputation on its own,
through the one ODE solution all layers share (the second layer would find its graph freed); torchtune's
``set_activation_checkpointing`` is non-reentrant.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from torchtune_longshort.rope.base import ScaledRoPE
from torchtune_longshort.rope.checks import check_flag, check_positive_int
from torchtune_longshort.rope.clex_ode import CLEXFrequencyODE
from torchtune_longshort.rope.clex_recompute import RecomputeState, in_backward

_RecomputeState = RecomputeState  # the name a whole CLEX model pickled by an earlier version refers to

_ACTS = {"silu": nn.SiLU, "tanh": nn.Tanh}


def _forget_eval_cache(module: nn.Module, _incompatible_keys) -> None:
    """After a load: the weights changed, maybe without a version counter (inference tensors)."""
    module._eval_cache.clear()


class CLEXRoPE(CLEXFrequencyODE, ScaledRoPE):
    """CLEX: learnable, continuous frequency scaling through a neural ODE over the scaling factor t.

    Args:
        dim, max_seq_len, base, layout: see :class:`ScaledRoPE`. ``max_seq_len`` must cover the training
            positions, ``original_max_seq_len * t_max``.
        original_max_seq_len: L, the pre-trained context length.
        t_max: largest scaling factor seen in training (integer >= 1; CLEX Llama-2: 16).
        param_factor: width of the ODE's hidden layer, in units of ``dim`` (released: 1).
        act: ``"silu"`` (default here) or ``"tanh"`` (the released training script's default, train/argument.py).
        time_dt: RK4 step in t (released: 0.01).
        log_scale: also scale q by ``log(L_cur) / log(L)`` in every layer (the released ``log_scale`` option).
        sample_positions: in training, draw CLEX's random position ids when the caller passes none.
        t_min: smallest scaling factor drawn in training (released: 1). The released rule divides the sampled
            positions by ``seq_len // L``, which matches inference only for t >= seq_len / L: when training runs at
            a multiple of L, ``t_min = seq_len // L`` keeps every training step in the geometry inference uses.

    Parameters ``ode_up_proj`` [dim/2, param_factor*dim] and ``ode_down_proj`` [param_factor*dim, dim/2] are
    ordinary ``nn.Parameter``s: they train with the model and are saved in its state dict. The ODE itself (its
    weights' initialisation, its dynamics, its solution) is :class:`~.clex_ode.CLEXFrequencyODE`'s.
    """

    method = "clex"
    length_dependent = True
    transformers_representable = False  # the learned frequency ODE has no config.json entry in transformers
    has_learned_parameters = True  # ode_up_proj / ode_down_proj
    learned_settings = ("param_factor", "act", "time_dt", "log_scale")  # what the ODE computes (not how t is drawn)
    needs_original_length = True
    # Under compile, cos/sin run eager too: a checkpointed layer's recomputation finds the state in the recompute
    # holder (see the module doc), so a compiled layer picked another graph in backward than in its forward and
    # torch's checkpoint refused it (CheckpointError: recomputed tensors differ), 2-layer model, 2026-11-27.
    compile_note = (
        "t and the positions are drawn and the frequency ODE solved (RK4, its steps follow t) once per forward in a "
        "decoder hook, and cos/sin computed from them, eager: a checkpointed layer's recompute reads that state "
        "elsewhere and a compiled one would pick another graph than its forward's; the layers take cos/sin as "
        "inputs (one graph for t = 1, without ODE gradient, one for t > 1)"
    )
    compile_eager_methods = ("cos_sin",)

    @classmethod
    def default_kwargs(cls, max_seq_len, original_max_seq_len, given=None):
        # t_max: the largest scaling factor the ODE is trained for; here L'/L, the positions max_seq_len covers
        # (the released training script's max_factor defaults to 16, at 4096-token sequences).
        out = super().default_kwargs(max_seq_len, original_max_seq_len, given)
        out.setdefault("t_max", max(1, max_seq_len // out["original_max_seq_len"]))
        return out

    scale_parameter = "t_max"  # inference takes t = ceil(L_cur / L) capped at t_max (param_factor sizes the ODE)

    @classmethod
    def covered_length(cls, spec, original_max_seq_len):
        # past L * t_max the ODE's frequencies extrapolate
        if "t_max" not in spec:
            return None
        return original_max_seq_len * cls._checked_t_max(spec["t_max"])

    @staticmethod
    def _checked_t_max(t_max) -> int:
        if isinstance(t_max, bool) or not isinstance(t_max, (int, float)) or t_max < 1 or int(t_max) != t_max:
            raise ValueError(f"t_max={t_max!r} is not accepted: CLEX needs an integer scaling factor t_max >= 1")
        return int(t_max)

    def __init__(
        self,
        dim,
        max_seq_len,
        base=10_000.0,
        *,
        original_max_seq_len: int,
        t_max,
        param_factor: int = 1,
        act: str = "silu",
        time_dt: float = 0.01,
        log_scale: bool = False,
        sample_positions: bool = True,
        t_min: int = 1,
        layout="interleaved",
    ):
        super().__init__(dim, max_seq_len, base, layout)
        if self.dim == 2:
            raise ValueError("head_dim=2 is not accepted for clex: the NTK exponent dim/(dim-2) is undefined")
        self.t_max = self._checked_t_max(t_max)
        if isinstance(t_min, bool) or not isinstance(t_min, (int, float)) or int(t_min) != t_min \
                or not 1 <= t_min <= self.t_max:
            raise ValueError(f"t_min={t_min!r} is not accepted: expected an integer in [1, t_max={self.t_max}]")
        self.t_min = int(t_min)
        self.original_max_seq_len = check_positive_int("original_max_seq_len", original_max_seq_len)
        if self.original_max_seq_len < 2:
            raise ValueError("original_max_seq_len must be >= 2 for CLEX (log-length and position sampling)")
        if self.original_max_seq_len * self.t_max > self.max_seq_len:
            raise ValueError(
                f"max_seq_len={self.max_seq_len} is too short for CLEX training positions: it must be >= "
                f"original_max_seq_len * t_max = {self.original_max_seq_len} * {self.t_max}: give max_seq_len >= "
                f"{self.original_max_seq_len * self.t_max}"
                + (f", or t_max <= {self.max_seq_len // self.original_max_seq_len}"
                   if self.max_seq_len >= self.original_max_seq_len else "")
            )
        check_positive_int("param_factor", param_factor)
        if not isinstance(act, str) or act not in _ACTS:  # a list or mapping: "unhashable type", naming no key
            raise ValueError(f"act={act!r} is not accepted: expected one of {sorted(_ACTS)}")
        if not (isinstance(time_dt, (int, float)) and 0 < time_dt <= 1):
            raise ValueError(f"time_dt={time_dt!r} is not accepted: expected a step in (0, 1]")
        self.param_factor = param_factor
        self.act_name = act
        self.act = _ACTS[act]()
        self.time_dt = float(time_dt)
        self.log_scale = check_flag("log_scale", log_scale)
        self.sample_positions = check_flag("sample_positions", sample_positions)
        self.ode_up_proj = nn.Parameter(torch.empty(dim // 2, param_factor * dim, dtype=torch.float32))
        self.ode_down_proj = nn.Parameter(torch.empty(param_factor * dim, dim // 2, dtype=torch.float32))
        self._state: Optional[tuple] = None
        self._state_trains = False  # _state is a training forward's with autograd on: its backward may recompute
        self._recompute = RecomputeState()
        self._eval_cache: dict = {}
        self.register_load_state_dict_post_hook(_forget_eval_cache)  # a module function: the module pickles
        self.reset_ode_parameters()
        self.rope_init()

    # --- parameters --------------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        self.reset_ode_parameters()
        self.rope_init()

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        # The ODE runs in float32 (users of the released code report NaN gradients otherwise): keep its weights
        # in float32 when the model is cast to bf16/fp16.
        for p in (self.ode_up_proj, self.ode_down_proj):
            if p.is_floating_point() and p.dtype != torch.float32 and not p.is_meta:
                p.data = p.data.float()
        self._eval_cache.clear()
        return out

    # --- t at inference ------------------------------------------------------------------------------------
    def inference_t(self, length: int) -> int:
        """``ceil(length / L)`` capped to [1, t_max]."""
        return min(max(1, math.ceil(length / self.original_max_seq_len)), self.t_max)

    # --- per-forward preparation ---------------------------------------------------------------------------
    def sample_training_positions(self, seq_len: int, t: int, generator=None) -> torch.Tensor:
        """CLEX's training positions [seq_len] (float), the released rule: 0, a sorted random subset of
        (0, seq_len*t - 1) divided by ``scale = max(1, seq_len // L)``, and ``seq_len*t // scale - 1`` (integer
        division: at scale > 1 the last position is not the others' (seq_len*t - 1) / scale)."""
        return self._host_training_positions(seq_len, t, generator).to(self.ode_up_proj.device)

    def _host_training_positions(self, seq_len: int, t: int, generator=None) -> torch.Tensor:
        """:meth:`sample_training_positions` on the host, where the generator draws them (reading their maximum
        there is no device sync)."""
        if seq_len < 2:
            return torch.zeros(seq_len)
        scale = max(1, seq_len // self.original_max_seq_len)
        span = seq_len * t
        inner = torch.randperm(span - 2, generator=generator)[: seq_len - 2].sort().values.float() + 1
        return torch.cat([torch.zeros(1), inner / scale, torch.tensor([float(span // scale - 1)])])

    def check_training_length(self, seq_len: int, field: str = "seq_len") -> None:
        """``ValueError`` when a training forward of ``seq_len`` tokens could draw a position past ``max_seq_len``:
        the positions spread over ``seq_len * t`` divided by ``seq_len // original_max_seq_len`` (at least 1), so at
        t = t_max a length between L and 2 L reaches past ``L * t_max``. Asked before training: the draw failed at
        whichever step first drew a t large enough."""
        if seq_len < 2 or not self.sample_positions:
            return
        scale = max(1, seq_len // self.original_max_seq_len)

        def top(t: int) -> float:  # the last position, or an inner one drawn from the top of the span
            return max(seq_len * t // scale - 1, (seq_len * t - 2) / scale)

        if top(self.t_max) < self.max_seq_len:
            return
        t_fit = max(t for t in range(1, self.t_max + 1) if t == 1 or top(t) < self.max_seq_len)
        multiple = self.original_max_seq_len * max(1, -(-seq_len // self.original_max_seq_len))
        raise ValueError(f"{field}={seq_len}: CLEX's training positions reach {top(self.t_max):.0f} at "
                         f"t_max={self.t_max} (they spread over {field} * t / max(1, {field} // "
                         f"original_max_seq_len={self.original_max_seq_len})"
                         f"), past max_seq_len={self.max_seq_len}: make {field} a multiple of "
                         f"{self.original_max_seq_len} (e.g. {multiple}), or set the model's t_max to {t_fit}")

    def prepare(self, seq_len: int, input_pos: Optional[torch.Tensor] = None, generator=None) -> None:
        """Fix t (and, in training, the positions) for one model forward; ``clear()`` undoes it."""
        positions = None
        generator = generator if generator is not None else self.generator
        if self.training:
            t = int(torch.randint(self.t_min, self.t_max + 1, (1,), generator=generator))
            theta = self.inv_freq_at(t)
            if input_pos is None and self.sample_positions:
                positions = self._host_training_positions(seq_len, t, generator)
                if positions.numel() and float(positions.max()) >= self.max_seq_len:
                    raise ValueError(
                        f"CLEX training positions reach {float(positions.max()):.0f} >= "
                        f"max_seq_len={self.max_seq_len}: "
                        f"with seq_len={seq_len} and t={t}, build the model for at least seq_len * t_max positions"
                    )
                positions = positions.to(self.ode_up_proj.device)
        else:
            length = self.call_length(seq_len, input_pos)
            t = self.inference_t(length)
            theta = self._eval_inv_freq(t)
        self._state = (t, theta, positions)
        self._state_trains = self.training and torch.is_grad_enabled()

    def clear(self) -> None:
        """End the prepared forward. A training forward's state stays available to the recomputation of its
        layers during its backward (activation checkpointing), until the next training forward replaces it."""
        if self._state is not None and self._state_trains:
            self._recompute.state = self._state
        self._state = None
        self._state_trains = False

    def _active_state(self) -> Optional[tuple]:
        """The prepared forward's state; during a backward pass with none prepared, the last training forward's
        (the layer being recomputed by activation checkpointing belongs to it); else None."""
        if self._state is not None:
            return self._state
        if self._recompute.state is not None and in_backward():
            return self._recompute.state
        return None

    @property
    def current_t(self) -> Optional[int]:
        return None if self._state is None else self._state[0]

    def query_scale(self, positions: torch.Tensor, layer_idx: int) -> Optional[torch.Tensor]:
        """The released ``log_scale``: q *= log(L_cur) / log(L) with L_cur = max(position) + 1; None if off."""
        if not self.log_scale:
            return None
        length = positions.max().to(torch.float32) + 1
        return (torch.log(length) / math.log(self.original_max_seq_len)).expand(positions.shape)

    # --- forward -------------------------------------------------------------------------------------------
    def check_positions(self, seq_len, input_pos):
        state = self._active_state()
        if input_pos is None and state is not None and state[2] is not None:
            return  # sampled positions were checked in prepare()
        super().check_positions(seq_len, input_pos)

    def cos_sin(self, seq_len, input_pos):
        state = self._active_state()
        if state is not None:
            _, theta, sampled = state
            if state is self._state and self._state_trains and theta.requires_grad and not torch.is_grad_enabled():
                raise RuntimeError(
                    "CLEX: a layer of a training forward runs without autograd (reentrant activation checkpointing?): "
                    "CLEX's learned frequencies would get no gradient from it. Use non-reentrant checkpointing "
                    "(torchtune's set_activation_checkpointing, use_reentrant=False)"
                )
        else:
            length = self.call_length(seq_len, input_pos)
            theta, sampled = self._eval_inv_freq(self.inference_t(length)), None
        if input_pos is not None:
            pos = input_pos.to(torch.float32)
        elif sampled is not None:
            pos = sampled[:seq_len]
        else:
            pos = torch.arange(seq_len, dtype=torch.float32, device=theta.device)
        angles = (pos.to(theta.device)[..., None] * theta).view(-1, seq_len, 1, self.dim // 2)
        return angles.cos(), angles.sin()

    def extra_spec(self):
        return {
            "original_max_seq_len": self.original_max_seq_len,
            "t_max": self.t_max,
            "param_factor": self.param_factor,
            "act": self.act_name,
            "time_dt": self.time_dt,
            "log_scale": self.log_scale,
            "sample_positions": self.sample_positions,
            **({"t_min": self.t_min} if self.t_min != 1 else {}),  # the released rule (1) keeps its old spec
        }
