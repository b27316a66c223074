"""train_run against a hand-rolled run of RunConfig's docstring: the same seeds and batches trained for every step,
validated at every eval_every, then the rule applied afterwards to the recorded validation MSEs (stop after
``patience`` evaluations without a 1% improvement, keep the best weights) and the kept weights tested by hand per
length, on the target scale and in f-space."""

import copy
import math

import pytest
import torch
import torch.nn as nn

from torchtune_longshort.synthetic.models import LinearAttentionModel
from torchtune_longshort.synthetic.outrep import get_outrep
from torchtune_longshort.synthetic.tasks import eval_lengths, make_batch, train_lengths
from torchtune_longshort.synthetic.train import RunConfig, train_run


def _hand_run(cfg):
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    g_val = torch.Generator().manual_seed(10_000 + cfg.seed)
    g_test = torch.Generator().manual_seed(20_000 + cfg.seed)
    f = get_outrep(cfg.outrep)
    model = LinearAttentionModel(dim=max(cfg.dim // 8, 2), query=cfg.query)
    if cfg.optimizer == "sgd":  # SGD with momentum 0.9
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    val = make_batch(train_lengths(cfg.val_size, cfg.l_train, g_val), cfg.task, g_val, cfg.bits)
    evals = []  # (step, validation MSE in f-space, weights)
    for step in range(1, cfg.max_steps + 1):
        for grp in opt.param_groups:
            grp["lr"] = 0.5 * cfg.lr * (1 + math.cos(math.pi * (step - 1) / cfg.max_steps))
        model.train()
        b = make_batch(train_lengths(cfg.batch_size, cfg.l_train, g), cfg.task, g, cfg.bits)
        loss = nn.functional.mse_loss(model(b.tokens, b.eos_pos), f.forward(b.target).float())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            with torch.no_grad():
                v = float(((model(val.tokens, val.eos_pos) - f.forward(val.target).float()) ** 2).mean())
            evals.append((step, v, copy.deepcopy(model.state_dict())))
    # the rule, on the whole record
    best, kept, since, stop, small = math.inf, None, 0, evals[-1][0], False
    for step, v, state in evals:
        if v < 0.99 * best:
            best, kept, since = v, state, 0
        else:
            small |= v < best
            since += 1
            if since == cfg.patience:
                stop = step
                break
    model.load_state_dict(kept)
    test = make_batch(eval_lengths(cfg.l_test, cfg.test_per_length), cfg.task, g_test, cfg.bits)
    sq = {l: [] for l in range(1, cfg.l_test + 1)}
    sq_f = {l: [] for l in range(1, cfg.l_test + 1)}
    with torch.no_grad():
        for tok, eos, l, y in zip(test.tokens, test.eos_pos, test.lengths.tolist(), test.target):
            z = model(tok[None, : l + 2], eos[None]).double()[0]
            sq[l].append(float((f.inverse(z) - y) ** 2))
            sq_f[l].append(float((z - f.forward(y.double())) ** 2))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {"steps": stop, "best_val_mse": best, "test_mse": [mean(sq[l]) for l in sq],
            "test_mse_f": [mean(sq_f[l]) for l in sq_f], "small_gain_seen": small, "stopped_early": stop < cfg.max_steps}


@pytest.mark.parametrize("optimizer, outrep, lr", [("adamw", "log", 1e-2), ("sgd", "sqrt", 3e-3)])
def test_train_run_is_the_hand_rolled_run(optimizer, outrep, lr):
    cfg = RunConfig(task="length", model="linear", optimizer=optimizer, outrep=outrep, lr=lr, dim=16, l_train=4,
                    l_test=5, batch_size=16, val_size=32, max_steps=60, eval_every=1, patience=3,
                    test_per_length=3, seed=1)
    want = _hand_run(cfg)
    # the run exercises each part of the rule: a gain under 1% (not counted), a stop before max_steps (with weights
    # older than the last kept)
    assert want["small_gain_seen"] and want["stopped_early"]
    got = train_run(cfg)
    assert got["steps"] == want["steps"]
    assert got["best_val_mse"] == pytest.approx(want["best_val_mse"], rel=1e-5)
    for key in ("test_mse", "test_mse_f"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-9)
