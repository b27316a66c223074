"""Boundaries of the recipe config's rules between fields (``training.recipe_config.rules``), each against an
independent reference: numpy's own seed range, the README's equal-compute step count, torch.profiler's own schedule.
Hand mutation testing found each unasked: a flipped comparison passed every other test. Checked with
``local=False`` (keys, values and rules; nothing on this machine is read)."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from torchtune.config._utils import _merge_yaml_and_cli_args

from torchtune_longshort.training.recipe_config import load_recipe_config

BASE = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs/tiny/longshort_stdlib.yaml"))


def _load(overrides, world_size=1):
    return load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), overrides), world_size=world_size,
                              local=False)


def _numpy_takes(seed: int) -> bool:
    try:
        np.random.RandomState(seed)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_the_largest_seed_numpy_takes_on_every_rank_is_accepted(world_size):
    """Each process seeds numpy with ``seed + rank``: the largest seed whose every rank numpy accepts is accepted,
    the next one refused (numpy's own range decides, not a constant)."""
    top = next(s for s in range(2**32 - 1, 2**32 - 20, -1) if _numpy_takes(s + world_size - 1))
    assert not _numpy_takes(top + world_size)
    assert _load([f"seed={top}"], world_size).seed == top
    with pytest.raises(ValueError, match=rf"^seed={top + 1} is too large for {world_size} process"):
        _load([f"seed={top + 1}"], world_size)


@pytest.mark.parametrize("max_steps, overhead, alpha", [(4, 1, 0.1), (10, 2, 0.1), (10, 2, 0.0)])
def test_stop_after_step_at_the_last_step_is_accepted(max_steps, overhead, alpha):
    """The last step a run trains: ``max_steps``, or ``max_steps / equal_compute_overhead`` steps (floor) with
    ``loss.alpha > 0`` (Appendix F, the README's equal-compute rule). Stopping there is accepted; one past, refused."""
    last = max_steps // overhead if alpha > 0 else max_steps
    common = [f"max_steps={max_steps}", f"equal_compute_overhead={overhead}", f"loss.alpha={alpha}"]
    assert _load(common + [f"stop_after_step={last}"]).stop_after_step == last
    with pytest.raises(ValueError, match=rf"^stop_after_step={last + 1} is past this run's last step"):
        _load(common + [f"stop_after_step={last + 1}"])


@pytest.mark.parametrize("wait, warmup, active", [(2, 1, 1), (0, 3, 2), (1, 2, 1)])
def test_the_profiler_is_refused_only_when_torchs_schedule_traces_no_step(wait, warmup, active):
    """torch.profiler's own ``schedule`` says which of the run's steps are traced (recorded): a run of
    ``wait + warmup`` steps traces none (refused), one more step traces one (accepted)."""
    from torch.profiler import ProfilerAction, schedule

    sched = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
    recorded = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
    traced = [s for s in range(wait + warmup + 1) if sched(s) in recorded]
    first = traced[0]  # steps 0 .. first - 1 trace nothing
    prof = ["profiler.enabled=True", "profiler.cpu=True", f"profiler.wait_steps={wait}",
            f"profiler.warmup_steps={warmup}", f"profiler.active_steps={active}", "profiler.num_cycles=1"]
    assert _load(prof + [f"max_steps={first + 1}"]).profiler.enabled
    with pytest.raises(ValueError, match=rf"^profiler: wait_steps .* this run trains {first}: no step would be traced"):
        _load(prof + [f"max_steps={first}"])
