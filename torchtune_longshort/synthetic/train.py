"""Training and evaluation of one synthetic run (paper Sec. 3 / App. B).

MSE on the (OutRep-transformed) target, batch 256, cosine learning-rate schedule, early stop on a validation set drawn
from the *training* length range, then test MSE per test length 1..l_test measured on the original target scale
(f^{-1} applied to the prediction).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Dict

import torch
import torch.nn as nn

from torchtune_longshort.provenance import provenance
from torchtune_longshort.refusals import Refusal

from .models import LinearAttentionModel, SyntheticTransformer, check_pe, check_sizes
from .outrep import get_outrep
from .tasks import Batch, check_bits, check_task, eval_lengths, make_batch, train_lengths

MODELS = ("transformer", "linear")
OPTIMIZERS = ("adamw", "sgd")
PAPER_LRS = (5e-5, 1e-4, 5e-4)


class Diverged(Refusal, FloatingPointError):
    """A run's loss left the finite numbers (a learning rate too large): the command ends in one line naming the lr
    and the step (a refusal of the lr, see ``refusals``)."""


def _diverged(cfg: "RunConfig", step: int, what: str, value: float) -> Diverged:
    e = Diverged(f"training diverged at step {step}: the {what} is {value} at lr={cfg.lr:g} (task {cfg.task}, pe "
                 f"{cfg.pe}, outrep {cfg.outrep}, seed {cfg.seed}); use a smaller --lr (or --lrs values), e.g. the "
                 f"paper's {', '.join(f'{lr:g}' for lr in PAPER_LRS)}")
    e.step, e.what = step, what  # what a diverged run's record keeps (``lr_search.diverged_record``)
    return e


@dataclass
class RunConfig:
    """Everything that defines one run; ``asdict`` of it goes into the results JSON.

    task/bits: see ``tasks.py``.  pe: positional encoding.  outrep: target transform name.  model: "transformer"
    or "linear" (App. C.1 model; ``query`` picks its query token).  l_train/l_test: train lengths U[1, l_train],
    test lengths every value 1..l_test.  max_steps/eval_every/patience: early stopping on the validation MSE (in
    f-space) -- stop after ``patience`` evaluations without a 1% improvement, keep the best weights.  optimizer:
    "adamw", or "sgd" (momentum 0.9).
    """

    task: str = "length"
    bits: str = "iid"
    pe: str = "nope"
    outrep: str = "identity"
    model: str = "transformer"
    query: str = "eos"
    l_train: int = 10
    l_test: int = 50
    dim: int = 32
    num_layers: int = 2
    num_heads: int = 4
    batch_size: int = 256
    lr: float = 5e-4
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    max_steps: int = 500
    eval_every: int = 50
    patience: int = 4
    val_size: int = 2048
    test_per_length: int = 100
    seed: int = 0

    def validate(self) -> None:
        """Fail early on any bad field, naming it, its value and what is accepted (its kind first: a float length
        passed the range checks and failed in torch after training)."""
        for f in fields(self):
            v, kind = getattr(self, f.name), f.type if isinstance(f.type, str) else f.type.__name__
            if kind == "int" and (not isinstance(v, int) or isinstance(v, bool)):
                raise ValueError(f"{f.name}={v!r} must be an integer")
            if kind == "float" and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)):
                raise ValueError(f"{f.name}={v!r} must be a finite number")
            if kind == "str" and not isinstance(v, str):
                raise ValueError(f"{f.name}={v!r} must be a string")
        if not 0 <= self.seed < 2 ** 63:  # torch.manual_seed's range: a larger one overflowed there, a traceback
            raise ValueError(f"seed={self.seed} must be in [0, 2**63)")
        check_task(self.task)
        check_bits(self.bits)
        check_pe(self.pe)
        f = get_outrep(self.outrep)
        if f.positive and self.task != "length":  # a mean or a sum of bits is 0 for all-zero bits, whatever `bits`
            raise ValueError(f"outrep={self.outrep!r} needs targets in {f.domain}, but task={self.task!r} has a "
                             f"target of 0 (all bits 0); use task 'length', or an outrep defined at 0 (identity, sqrt)")
        if self.model not in MODELS:
            raise ValueError(f"model={self.model!r} is unknown; accepted: {', '.join(MODELS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer={self.optimizer!r} is unknown; accepted: {', '.join(OPTIMIZERS)}")
        if self.model == "transformer":
            check_sizes(self.pe, self.dim, self.num_layers, self.num_heads)
        elif self.dim < 1:
            raise ValueError(f"dim={self.dim} must be >= 1")
        if self.l_train < 1:
            raise ValueError(f"l_train={self.l_train} must be >= 1")
        if self.l_test < self.l_train:
            raise ValueError(
                f"l_test={self.l_test} < l_train={self.l_train}: the test range must contain the training range"
            )
        for name in ("batch_size", "max_steps", "eval_every", "patience", "val_size", "test_per_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if not self.lr > 0:
            raise ValueError(f"lr={self.lr} must be > 0")


# int64 copies of the test tokens alive at once while ``make_batch`` builds them: its peak measured 4.1x (iid bits)
# and 4.6x (uniform_ones) of the tokens' bytes (100 per length; l_test 1000 by the process's RSS, l_test 200 by
# torch's allocator events in tests/test_synthetic_refusals.py)
TEST_BATCH_COPIES = 4


def test_batch_bytes(cfg: RunConfig) -> int:
    """A floor on the peak bytes of a run's test set (``test_per_length`` sequences of every length 1..l_test, as
    int64 tokens of up to ``l_test + 2``): it grows as l_test squared, so an l_test far past the paper's 50 is refused
    by this figure (``devices.check_fits``) instead of the allocator's traceback, or the kernel's kill."""
    return TEST_BATCH_COPIES * 8 * cfg.l_test * cfg.test_per_length * (cfg.l_test + 2)


def build_model(cfg: RunConfig) -> nn.Module:
    """The model a config asks for, sized for sequences of up to ``l_test`` bits (+ BOS, EOS)."""
    if cfg.model == "linear":
        return LinearAttentionModel(dim=max(cfg.dim // 8, 2), query=cfg.query)
    return SyntheticTransformer(
        pe=cfg.pe, dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads, max_len=cfg.l_test + 2
    )


@torch.no_grad()
def predict(model: nn.Module, batch: Batch, outrep: str, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (z_hat, y_hat): the raw model output (f-space) and f^{-1} of it (target scale), both float64 ``[b]``."""
    f = get_outrep(outrep)
    model.eval()
    z = torch.empty(batch.tokens.shape[0], dtype=torch.float64)
    # one forward per length, cut to that length: padding would double the cost of a 1..l_test sweep
    for l in batch.lengths.unique().tolist():
        idx = (batch.lengths == l).nonzero().squeeze(1)
        for i in range(0, idx.numel(), chunk):
            j = idx[i : i + chunk]
            z[j] = model(batch.tokens[j, : l + 2], batch.eos_pos[j]).double()
    return z, f.inverse(z)


def _lr_at(step: int, max_steps: int, lr: float) -> float:
    # cosine decay from lr to 0 over max_steps (the paper's schedule); early stopping may end the run sooner
    return 0.5 * lr * (1.0 + math.cos(math.pi * step / max_steps))


def train_run(cfg: RunConfig, progress: bool = False) -> Dict:
    """Train one model and evaluate it.

    Returns a dict: ``config`` (the RunConfig as dict), ``steps`` run, ``best_val_mse`` (f-space, training lengths),
    ``test_lengths`` (1..l_test), ``test_mse`` (per length, target scale), ``test_mse_f`` (per length, f-space),
    ``seconds`` and, under key ``model``, the trained module (not JSON; callers drop it).
    """
    cfg.validate()
    t0 = time.time()
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    g_val = torch.Generator().manual_seed(10_000 + cfg.seed)
    g_test = torch.Generator().manual_seed(20_000 + cfg.seed)
    f = get_outrep(cfg.outrep)
    model = build_model(cfg)
    if cfg.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)

    val = make_batch(train_lengths(cfg.val_size, cfg.l_train, g_val), cfg.task, g_val, cfg.bits)
    val_z = f.forward(val.target).float()
    best, best_state, bad, step = float("inf"), None, 0, 0
    it = range(1, cfg.max_steps + 1)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"{cfg.task}/{cfg.pe}/{cfg.outrep}/s{cfg.seed}", leave=False)
    for step in it:
        model.train()
        for grp in opt.param_groups:
            grp["lr"] = _lr_at(step - 1, cfg.max_steps, cfg.lr)
        batch = make_batch(train_lengths(cfg.batch_size, cfg.l_train, g), cfg.task, g, cfg.bits)
        z = f.forward(batch.target).float()
        loss = nn.functional.mse_loss(model(batch.tokens, batch.eos_pos), z)
        if not math.isfinite(lv := float(loss.detach())):  # found at the step it happens, not at the next validation
            raise _diverged(cfg, step, "training loss", lv)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            model.eval()
            with torch.no_grad():
                v = float(nn.functional.mse_loss(model(val.tokens, val.eos_pos), val_z))
            if not math.isfinite(v):
                raise _diverged(cfg, step, "validation MSE", v)
            if v < best * 0.99:
                best, bad = v, 0
                best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
            else:
                bad += 1
                if bad >= cfg.patience:
                    break
    if best_state is not None:
        model.load_state_dict(best_state)

    test = make_batch(eval_lengths(cfg.l_test, cfg.test_per_length), cfg.task, g_test, cfg.bits)
    z_hat, y_hat = predict(model, test, cfg.outrep)
    lengths = test.lengths
    mse = torch.zeros(cfg.l_test, dtype=torch.float64).index_add_(0, lengths - 1, (y_hat - test.target) ** 2)
    if f.positive and bool((test.target <= 0).any()):
        mse_f = torch.full((cfg.l_test,), float("nan"), dtype=torch.float64)
    else:
        zt = f.forward(test.target)
        mse_f = torch.zeros(cfg.l_test, dtype=torch.float64).index_add_(0, lengths - 1, (z_hat - zt) ** 2)
    mse, mse_f = mse / cfg.test_per_length, mse_f / cfg.test_per_length
    return {
        "config": asdict(cfg),
        "steps": step,
        "best_val_mse": best,
        "test_lengths": list(range(1, cfg.l_test + 1)),
        "test_mse": mse.tolist(),
        "test_mse_f": mse_f.tolist(),
        "seconds": time.time() - t0,
        "model": model,
    }


def run_provenance() -> Dict:
    """The provenance block of every synthetic result file: the synthetic runs train on the CPU, without the
    stdlib corpus."""
    return provenance(device="cpu", stdlib=False)
