"""resume=True with one change of a component node listed every argument default the change took away: 'model.method
=linear' on a YaRN run was refused as 'model.alpha: 1.0 -> '<absent>'; model.attention_factor: None -> '<absent>';
model.beta: 32.0 -> '<absent>'; model.method: 'yarn' -> 'linear'; ...', and 'lr_scheduler=null' named
lr_scheduler.last_epoch and lr_scheduler.num_cycles, keys neither config writes. Such a default, one side without
it, is now left out of the refusal where a change is named beside it; a value both sides give (a RoPE factor the build
derives from max_seq_len) is still named."""

from __future__ import annotations

import re

import pytest

from torchtune_longshort.training.resume import compare_resume_config

INNER = {"_component_": "torchtune_longshort.models.hf_decoder", "family": "llama", "vocab_size": 64, "num_layers": 1,
         "num_heads": 2, "num_kv_heads": 1, "embed_dim": 32, "intermediate_dim": 64, "max_seq_len": 128}
YARN = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarn", "max_seq_len": 256, "model": INNER}
SCHED = {"_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup", "num_warmup_steps": 1}


def _refusal(saved, new) -> str:
    with pytest.raises(ValueError) as e:
        compare_resume_config(saved, new)
    return re.search(r"exactly: (.*)\. Resume with", str(e.value)).group(1)


def test_a_changed_rope_method_is_named_alone():
    assert _refusal({"model": YARN}, {"model": {**YARN, "method": "linear"}}) == "model.method: 'yarn' -> 'linear'"


def test_a_scheduler_set_to_null_is_named_by_what_the_saved_config_wrote():
    named = _refusal({"lr_scheduler": SCHED}, {"lr_scheduler": None})
    assert named == ("lr_scheduler: '<absent>' -> None; lr_scheduler._component_: "
                     "'torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup' -> '<absent>'; "
                     "lr_scheduler.num_warmup_steps: 1 -> '<absent>'")  # not last_epoch, num_cycles: defaults


def test_a_written_argument_is_named_beside_the_change_and_a_default_alone_still_refuses():
    assert _refusal({"model": YARN}, {"model": {**YARN, "factor": 4}}) == "model.factor: 2.0 -> 4"
    # a default that differs with nothing written differing (a component's default changed between versions)
    saved = {"lr_scheduler": {**SCHED, "num_cycles": 0.25}}
    assert _refusal(saved, {"lr_scheduler": SCHED}) == "lr_scheduler.num_cycles: 0.25 -> 0.5"
