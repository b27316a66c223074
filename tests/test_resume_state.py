"""What a resumed run's saved state gives back: the optimizer and the learning-rate schedule at the new config's
values, a state saved on a GPU read onto the CPU, a GPU run's CUDA generator, and the positions a state saved with
the earlier draw would change. Split from test_resume_policy.py (what a resume may change)."""

from __future__ import annotations

import pytest

from torchtune_longshort.training.resume import RESUME_POLICY, compare_resume_config


def _optimizer_and_schedule(max_steps: int, lr: float = 1e-3, warmup: int = 2, steps: int = 0, **kw):
    import torch
    from torchtune.training.lr_schedulers import get_cosine_schedule_with_warmup

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=lr, **kw)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=warmup, num_training_steps=max_steps)
    for _ in range(steps):
        opt.step()
        sched.step()
    return opt, sched


@pytest.mark.parametrize("saved, new, changes", [
    # a finished 4-step cosine run extended to 6: step 5 trained at lr 0 (the old schedule's end)
    (dict(max_steps=4, steps=4), dict(max_steps=6), [("max_steps", 4, 6)]),
    # the lr lowered inside the warmup: the first resumed step took the full new lr, 4x the warmup's
    (dict(max_steps=6, warmup=4, steps=1), dict(max_steps=6, warmup=4, lr=2.5e-4),
     [("optimizer.lr", 1e-3, 2.5e-4)]),
])
def test_a_resumed_step_trains_at_the_new_schedules_lr(saved, new, changes):
    """The reference: a fresh optimizer and schedule of the new config, stepped as far as the saved run went."""
    from torchtune_longshort.training.resume import apply_resume_changes, restore_optimizer

    old_opt, old_sched = _optimizer_and_schedule(**saved)
    state = {"optimizer": old_opt.state_dict(), "lr_scheduler": old_sched.state_dict()}
    opt, sched = _optimizer_and_schedule(**new)
    restore_optimizer(state, None, opt, sched, distributed=False, device="cpu")
    apply_resume_changes(changes, opt, sched, log=lambda m: None)
    ref_opt, ref_sched = _optimizer_and_schedule(**new, steps=saved["steps"])
    assert opt.param_groups[0]["lr"] == pytest.approx(ref_opt.param_groups[0]["lr"], rel=1e-12)
    assert opt.param_groups[0]["lr"] != old_opt.param_groups[0]["lr"]  # the state's lr was the stale one
    assert sched.get_last_lr() == pytest.approx(ref_sched.get_last_lr())


def test_an_optimizer_argument_left_out_on_resume_takes_the_default_and_its_class_cannot_change():
    """``~optimizer.weight_decay`` wrote the marker string into the param groups (a TypeError inside torch at the
    first step); AdamW -> SGD was "applied" and failed at the first step, AdamW -> Adam silently stayed AdamW."""
    from torchtune_longshort.training.resume import ABSENT, apply_resume_changes

    opt, sched = _optimizer_and_schedule(max_steps=4, weight_decay=0.0)
    apply_resume_changes([("optimizer.weight_decay", 0.0, ABSENT)], opt, sched, log=lambda m: None)
    assert opt.param_groups[0]["weight_decay"] == 0.01  # AdamW's default
    saved = {"optimizer": {"_component_": "torch.optim.AdamW", "lr": 1e-3}}
    new = {"optimizer": {"_component_": "torch.optim.SGD", "lr": 1e-3}}
    assert RESUME_POLICY["optimizer._component_"] == "exact"
    with pytest.raises(ValueError, match=r"optimizer._component_: 'torch.optim.AdamW' -> 'torch.optim.SGD'"):
        compare_resume_config(saved, new)


def test_a_recipe_state_saved_on_a_gpu_is_read_onto_the_cpu(tmp_path):
    """A one-GPU run saves its optimizer states as CUDA tensors (torch.save tags each storage ``cuda:0``). Read back
    without ``map_location`` they failed on a CPU machine ("Attempting to deserialize object on a CUDA device") and,
    under torchrun, every rank put the whole state on the saving run's GPU; read onto the CPU, the optimizer's
    ``load_state_dict`` moves each to its parameter's device."""
    from unittest import mock

    import torch
    import torch.serialization

    from torchtune_longshort.training.checkpointing import recipe_state_path
    from torchtune_longshort.training.resume import read_resume_state

    step = tmp_path / "step_1"
    step.mkdir()
    path = recipe_state_path(step)
    path.parent.mkdir()
    with mock.patch.object(torch.serialization, "location_tag", lambda storage: "cuda:0"):  # as a CUDA run writes
        torch.save({"step": 1, "optimizer": {"state": {0: {"exp_avg": torch.ones(3)}}, "param_groups": []}}, path)
    state, changes = read_resume_state(step, {})
    assert state["optimizer"]["state"][0]["exp_avg"].device.type == "cpu" and changes == []


def test_a_gpu_runs_cuda_generator_is_saved_and_put_back(monkeypatch):
    """On a GPU, dropout and LoRA dropout draw from the CUDA generator, not the CPU's: the recipe state saved only
    ``torch.get_rng_state()``, so a resumed GPU run with dropout drew other masks than the run it continues. Now
    the current CUDA device's state is saved beside it (torch.cuda's calls stubbed: this CPU has no CUDA) and put
    back on resume and when a bad record rolls a step back; a state saved without it leaves CUDA's as it is."""
    import torch

    from torchtune_longshort.devices import rng_states, set_rng_states
    from torchtune_longshort.training.recipe_checkpoints import training_state

    cuda = {"state": torch.tensor([7, 7], dtype=torch.uint8)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda *a: cuda["state"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, *a: cuda.update(state=s.clone()))

    class Batcher:
        def state_dict(self):
            return {}

    saved = training_state(3, {}, None, Batcher(), {}, {})
    assert saved["cuda_rng"].tolist() == [7, 7] and torch.equal(saved["torch_rng"], torch.get_rng_state())
    torch.rand(5)
    cuda["state"] = torch.tensor([9, 9], dtype=torch.uint8)  # the GPU drew after the save
    set_rng_states(saved)
    assert cuda["state"].tolist() == [7, 7] and torch.equal(torch.get_rng_state(), saved["torch_rng"])
    set_rng_states({"torch_rng": saved["torch_rng"]})  # a state saved before cuda_rng existed, or on a CPU
    assert cuda["state"].tolist() == [7, 7] and set(rng_states()) == {"torch_rng", "cuda_rng"}


def test_a_resume_of_a_state_saved_with_the_earlier_position_draw_says_its_positions_change():
    """Versions before 2026-12-05 drew a micro-batch's PoSE / random_pos ids every window A, then every B (the
    reference below); this one draws sample by sample. The same generator state then gives 2 samples other ids, so
    a run they saved resumed with other losses than it would have had (2e-4 at the next step), without a word. A
    state saved now carries the draw's mark; one without it, with 2+ samples a micro-batch, gets one line; one
    sample draws alike both ways, and says nothing."""
    import torch

    from torchtune_longshort.rope import PoSEPositions
    from torchtune_longshort.training.data_setup import earlier_position_draw, window_positions
    from torchtune_longshort.training.recipe_checkpoints import training_state

    class Batcher:
        def state_dict(self):
            return {}

    sampler = PoSEPositions(target_len=512)

    def earlier(rows):  # the earlier versions' draw
        return sampler.sample(2 * rows, 64, generator=torch.Generator().manual_seed(3))

    for rows, alike in ((1, True), (2, False)):
        now = window_positions(sampler, torch.Generator().manual_seed(3), rows, 64, 0, 1)
        assert torch.equal(now, earlier(rows)) is alike, rows
    gen = torch.Generator().manual_seed(3)
    saved = training_state(4, {}, None, Batcher(), {"position_generator": gen}, {})
    assert earlier_position_draw(saved, sampler, 2) is None  # saved by this version
    old = {k: v for k, v in saved.items() if k != "position_draw"}
    said = earlier_position_draw(old, sampler, 2)
    assert said is not None and said.startswith("resume: step 4 was saved by an earlier torchtune_longshort, which "
                                                "drew a micro-batch's position ids (position_sampler) every window A, "
                                                "then every B"), said
    assert "from step 5 on the samples get other positions" in said, said
    assert earlier_position_draw(old, sampler, 1) is None  # one sample: drawn alike
    assert earlier_position_draw(old, None, 2) is None  # no sampler
    assert earlier_position_draw({**old, "position_generator": None}, sampler, 2) is None  # saved without one


@pytest.mark.parametrize("warmup, saved_steps, differs", [
    (0, 2, True),   # cosine from step 1: step 2's lr is the 2-step schedule's end, not the 4-step one's middle
    (3, 2, False),  # steps 1-2 inside a 3-step warmup: the same lrs under either length, the losses unchanged
])
def test_a_max_steps_change_says_the_steps_made_were_on_the_old_schedule_where_their_lrs_differ(
        warmup, saved_steps, differs):
    """``max_steps=2`` then ``resume=True max_steps=4``: steps 1-2 trained on the 2-step cosine, so the losses are
    not an uninterrupted 4-step run's; said only where torchtune's own schedule gives those steps other lrs."""
    from torchtune_longshort.training.resume import apply_resume_changes, restore_optimizer

    old_opt, old_sched = _optimizer_and_schedule(max_steps=2, warmup=warmup, steps=saved_steps)
    lrs_old, lrs_new = [], []
    for lrs, kw in ((lrs_old, dict(max_steps=2)), (lrs_new, dict(max_steps=4))):
        for k in range(saved_steps):
            lrs.append(_optimizer_and_schedule(warmup=warmup, steps=k, **kw)[0].param_groups[0]["lr"])
    assert (lrs_old != lrs_new) == differs  # the reference: torchtune's schedule at each step made
    state = {"optimizer": old_opt.state_dict(), "lr_scheduler": old_sched.state_dict()}

    def schedule_at(max_steps):
        return _optimizer_and_schedule(max_steps=max_steps, lr=1.0, warmup=warmup)

    said = {}
    for name, sched_at in (("schedule", schedule_at), ("lr_scheduler=null", None)):
        opt, sched = _optimizer_and_schedule(max_steps=4, warmup=warmup)
        restore_optimizer(state, None, opt, sched, distributed=False, device="cpu")
        lines = []
        apply_resume_changes([("max_steps", 2, 4)], opt, sched if sched_at else None, lines.append, sched_at)
        said[name] = lines
    assert said["lr_scheduler=null"] == ["resume: max_steps changed 2 -> 4 (applied)"]
    assert said["schedule"] == ["resume: max_steps changed 2 -> 4 (applied" + (
        ": steps 1-2 were made on the 2-step schedule, steps 3-4 follow the 4-step one; the losses are not an "
        "uninterrupted 4-step run's" if differs else "") + ")"]
