"""``optimizer``: built once on a stand-in parameter, so torch's own checks (lr, betas, weight decay) run now, each
refusal naming its field; and what torch does not check but its update makes certain (a decoupled decay at
``lr * weight_decay >= 1``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Tuple

import torch

from torchtune_longshort.config.fields import FROM_COMPONENT, ComponentSection, setting
from torchtune_longshort.config.values import boolean, number, refuse, resolve_component


# torch optimizers' switches (null: torch's default where it takes None, fused / foreach)
OPTIMIZER_FLAGS = ("fused", "foreach", "capturable", "amsgrad", "maximize", "differentiable", "decoupled_weight_decay")
# what torch.optim's optimizers accept of the arguments they check ('Invalid weight_decay value: -1', ...)
TORCH_OPTIMIZER_ACCEPTS = {"eps": "a number >= 0", "weight_decay": "a number >= 0", "momentum": "a number >= 0",
                           "betas": "a pair [beta1, beta2], each in [0, 1)"}


@dataclass(frozen=True)
class OptimizerConfig(ComponentSection):
    """``optimizer``: a torch optimizer class, given the trainable parameters by the recipe."""

    PASSED_BY_RECIPE: ClassVar[Tuple[str, ...]] = ("params",)
    # its arguments may change on resume (applied to the loaded state); its class may not: the saved state is that
    # class's (AdamW's into SGD failed at the first step, into Adam it silently kept AdamW's decoupled decay)
    RESUME_EXACT: ClassVar[Tuple[str, ...]] = ("_component_",)
    lr: float = setting(FROM_COMPONENT, doc="learning rate", check=number(0.0))

    def check(self, where: str) -> None:
        build = resolve_component(f"{where}._component_", self.component)
        betas = self.args.get("betas")  # torch: "list index out of range" for [0.9]
        if betas is not None and (not isinstance(betas, (list, tuple)) or len(betas) != 2):
            raise ValueError(f"{where}.betas={betas!r} is not accepted: expected a pair [beta1, beta2] (e.g. [0.9, "
                             "0.95]), each in [0, 1)")
        for key in OPTIMIZER_FLAGS:  # torch reads their truthiness: fused='abc' trained with fused AdamW
            if self.args.get(key) is not None:
                boolean(f"{where}.{key}", self.args[key])
        for key in ("eps", "weight_decay", "momentum"):  # torch reads True as 1: weight_decay=true trained with 1.0
            if isinstance(self.args.get(key), bool) and str(self.component).startswith("torch.optim."):
                raise refuse(f"{where}.{key}", self.args[key], TORCH_OPTIMIZER_ACCEPTS[key])
        try:
            built = build([torch.nn.Parameter(torch.zeros(1))], **self.args)
        except (ValueError, TypeError, IndexError) as e:  # torch's own argument checks, and what a value of another
            # kind makes them raise (weight_decay='abc', betas=[0.9]); device-dependent options are left to the build
            raise ValueError(self._refusal(build, where, e)) from None
        self._check_decoupled_decay(built.defaults, where)

    def _check_decoupled_decay(self, defaults: Mapping[str, Any], where: str) -> None:
        """torch's decoupled weight decay (AdamW; Adam, NAdam, RAdam with ``decoupled_weight_decay``) multiplies every
        weight by ``1 - lr * weight_decay`` at each step: at ``lr * weight_decay >= 1`` that zeroes or flips them all
        (weight_decay=1e30 trained 2 steps, then stopped on a NaN gradient whose advice named neither key). SGD's and
        Adam's L2 decay goes through the gradient (and momentum): not refused, its effect is not that certain."""
        lr, decay = defaults.get("lr"), defaults.get("weight_decay")
        if (not str(self.component).startswith("torch.optim.") or defaults.get("decoupled_weight_decay") is not True
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lr, decay))):
            return
        if lr * decay >= 1:
            raise ValueError(f"{where}.weight_decay={decay!r} with {where}.lr={lr!r} is not accepted: "
                             f"{self.component}'s decoupled decay multiplies every weight by 1 - lr * weight_decay = "
                             f"{1 - lr * decay:.3g} "
                             f"at each step, which zeroes or flips them; expected weight_decay < 1 / lr = "
                             f"{1 / lr:.4g} (AdamW's usual 0.01 .. 0.1)")

    def _refusal(self, build: Any, where: str, error: Exception) -> str:
        """torch's refusal of the arguments in one line naming the field: the argument without which the optimizer
        builds, with what torch's optimizers accept of it (``optimizer.weight_decay=-1 is not accepted: expected a
        number >= 0``; torch said 'Invalid weight_decay value: -1', and '\'<=\' not supported between instances of
        \'float\' and \'str\'' of 'abc'), or the optimizer's own words; two or more refused at once: each refused
        alone (beside lr and the flags), all named, when it builds without them; else torch's words after the
        arguments."""
        keys = [k for k in self.args if k not in OPTIMIZER_FLAGS and k != "lr"]  # the flags and lr: checked above

        def refused(drop: Any) -> Any:  # torch's error building without the arguments ``drop``, None if it builds
            try:
                build([torch.nn.Parameter(torch.zeros(1))], **{k: v for k, v in self.args.items() if k not in drop})
            except (ValueError, TypeError, IndexError) as e:
                return e
            return None

        for key in keys:
            if refused({key}) is None:
                return self._named(where, key, error)
        alone = {k: refused(set(keys) - {k}) for k in keys}
        bad = [k for k, e in alone.items() if e is not None]
        if bad and refused(set(bad)) is None:
            return "; ".join(self._named(where, k, alone[k]) for k in bad)
        return f"{where} ({', '.join(f'{k}={v!r}' for k, v in self.args.items())}): {error}"

    def _named(self, where: str, key: str, error: Exception) -> str:
        """``where.key``'s value refused: what torch.optim's optimizers accept of it, or the optimizer's words."""
        if str(self.component).startswith("torch.optim.") and key in TORCH_OPTIMIZER_ACCEPTS:
            return str(refuse(f"{where}.{key}", self.args[key], TORCH_OPTIMIZER_ACCEPTS[key]))
        return f"{where}.{key}={self.args[key]!r} is not accepted by {self.component}: {error}"
