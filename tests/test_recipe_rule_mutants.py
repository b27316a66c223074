"""Recipe config rules (``training.recipe_config.rules``) that hand mutation testing found unasked, each against an
independent reference: torch's own device parsing (``cuda:0`` is a CUDA device, so activation offloading takes it),
torch.profiler's own schedule over the steps ``stop_after_step`` leaves. Checked with ``local=False``."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torchtune.config._utils import _merge_yaml_and_cli_args

from torchtune_longshort.training.recipe_config import load_recipe_config
from torchtune_longshort.training.recipe_config.rules import offloading_refusal

BASE = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs/tiny/longshort_stdlib.yaml"))


def _load(overrides):
    return load_recipe_config(_merge_yaml_and_cli_args(Namespace(**BASE), overrides), world_size=1, local=False)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1", "cpu", "mps"])
def test_offloading_is_accepted_on_every_device_torch_calls_cuda(device):
    """A device with an index (``cuda:1``) is a CUDA device: torch.device's own ``type`` decides."""
    said = offloading_refusal(True, True, device)
    assert (said is None) == (torch.device(device).type == "cuda"), said
    if said is not None:
        assert said.startswith(f"enable_activation_offloading=True is not accepted with device={device}")


@pytest.mark.parametrize("wait, warmup", [(2, 1), (0, 3)])
def test_the_profiler_is_refused_when_stop_after_step_ends_the_run_before_its_first_traced_step(wait, warmup):
    """``max_steps`` leaves room for a traced step, ``stop_after_step`` does not: torch.profiler's own schedule says
    the first recorded step; stopping there traces none (refused), one step later traces one (accepted)."""
    from torch.profiler import ProfilerAction, schedule

    sched = schedule(wait=wait, warmup=warmup, active=1, repeat=1)
    first = next(s for s in range(20) if sched(s) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE))
    prof = ["profiler.enabled=True", "profiler.cpu=True", f"profiler.wait_steps={wait}",
            f"profiler.warmup_steps={warmup}", "profiler.active_steps=1", "profiler.num_cycles=1", "max_steps=20"]
    assert _load(prof + [f"stop_after_step={first + 1}"]).stop_after_step == first + 1
    with pytest.raises(ValueError, match=rf"^profiler: wait_steps .* this run trains {first}: no step would be traced"):
        _load(prof + [f"stop_after_step={first}"])
