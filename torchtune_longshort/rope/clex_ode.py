"""CLEX's frequency ODE (Chen et al. 2024, ICLR): the log inverse frequencies z(t) over the length-scaling factor t,

    dz/dt = g(z, t) = act((z + log theta_ntk(t)) W_up) W_down + d/dt log theta_ntk(t),    z(1) = log theta

solved in float32 with fixed-step RK4 (:func:`~.ode.rk4_solve`), and the released initialisation of its two weights
(W_down zero: an untrained CLEX follows the NTK path). :mod:`.clex` has the whole method (the t draw, the positions,
the per-forward state); this is the part that computes frequencies from t.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from torchtune_longshort.rope.base import default_inv_freq
from torchtune_longshort.rope.ode import rk4_solve


class CLEXFrequencyODE:
    """The ODE's methods of :class:`~.clex.CLEXRoPE`, which sets what they read: ``dim``, ``base``, ``act``,
    ``time_dt``, the parameters ``ode_up_proj`` / ``ode_down_proj`` and the eval cache ``_eval_cache``."""

    # --- parameters --------------------------------------------------------------------------------------
    @staticmethod
    def _init_ode(up: torch.Tensor, down: torch.Tensor) -> None:
        """The released initialisation: Kaiming-uniform up projection, zero down projection (NTK path)."""
        nn.init.kaiming_uniform_(up, a=math.sqrt(5))
        nn.init.zeros_(down)

    def reset_ode_parameters(self) -> None:
        if self.ode_up_proj.is_meta:
            return
        self._init_ode(self.ode_up_proj, self.ode_down_proj)
        self._eval_cache.clear()

    def initial_learned_parameters(self) -> dict:
        """Fresh float32 CPU values of the ODE's weights, drawn by the released rule from torch's global stream:
        what a new run starts from, whatever device, dtype or sharding the module itself has."""
        up = torch.empty(tuple(self.ode_up_proj.shape), dtype=torch.float32)
        down = torch.empty(tuple(self.ode_down_proj.shape), dtype=torch.float32)
        self._init_ode(up, down)
        return {"ode_up_proj": up, "ode_down_proj": down}

    def ode_weights(self) -> tuple:
        """``(up, down)`` as plain float32 tensors: the parameters, or the local copies of replicated DTensors
        (several processes), through which autograd accumulates each rank's gradient into the DTensor's."""
        return tuple(p.to_local().float() if hasattr(p, "to_local") else p.float()
                     for p in (self.ode_up_proj, self.ode_down_proj))

    # --- the ODE -----------------------------------------------------------------------------------------
    def _index(self, device) -> torch.Tensor:
        return torch.arange(0, self.dim, 2, dtype=torch.float32, device=device)

    def ntk_log_inv_freq(self, t: float, device=None) -> torch.Tensor:
        """log of NTK-aware inverse frequencies with alpha = 2t - 1 (the ODE's time embedding and its NTK path)."""
        alpha = max(2.0 * t - 1.0, 1.0)
        idx = self._index(device)
        return -(idx / self.dim) * math.log(self.base) - (idx / (self.dim - 2)) * math.log(alpha)

    def dynamics(self, t: float, z: torch.Tensor, weights: Optional[tuple] = None) -> torch.Tensor:
        """g(z, t) of the module docstring, float32; ``weights``: :meth:`ode_weights`, read once per solve."""
        up, down = weights if weights is not None else self.ode_weights()
        alpha = max(2.0 * t - 1.0, 1.0)
        idx = self._index(z.device)
        dlog_ntk = -(idx / (self.dim - 2)) * (2.0 / alpha)
        hidden = self.act((z + self.ntk_log_inv_freq(t, z.device)) @ up)
        return hidden @ down + dlog_ntk

    def inv_freq_at(self, t: float) -> torch.Tensor:
        """Inverse frequencies at scaling factor ``t`` >= 1 (differentiable w.r.t. the ODE parameters)."""
        if t < 1:
            raise ValueError(f"t={t!r} is not accepted: CLEX's scaling factor starts at 1")
        weights = self.ode_weights()
        z0 = torch.log(default_inv_freq(self.dim, self.base, weights[0].device))
        if t == 1:
            return z0.exp()
        return rk4_solve(lambda s, z: self.dynamics(s, z, weights), z0, 1.0, float(t), self.time_dt).exp()

    def _eval_inv_freq(self, t: int) -> torch.Tensor:
        # Parameters do not change between eval calls unless trained or loaded: key the cache on their versions.
        # Weights made under torch.inference_mode (a model loaded there) have none: a load clears the cache instead.
        up, down = (p.to_local() if hasattr(p, "to_local") else p for p in (self.ode_up_proj, self.ode_down_proj))
        versions = tuple(None if p.is_inference() else p._version for p in (up, down))
        key = (t, *versions, up.data_ptr(), down.data_ptr(), up.device)
        hit = self._eval_cache.get(t)
        if hit is None or hit[0] != key:
            with torch.no_grad():
                hit = (key, self.inv_freq_at(t))
            self._eval_cache[t] = hit
        return hit[1]
